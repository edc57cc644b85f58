#!/usr/bin/env python3
"""An automated approval controller for GPU node pools in ``propose`` mode.

In ``propose`` mode autoclusters marks a faulty node (``<domain>/maintenance-required=true``,
a PreferNoSchedule taint, a condition) and waits for a human to add
``<domain>/maintenance-approved=true``. This controller is that human, automated: for
each node that needs a repair it runs your preparation step (signal the training job to
checkpoint, drain a Slurm node, page someone) and, when the step succeeds, approves.

How it works:

- One list + watch of the nodes that carry the required label (a label-selector watch,
  no polling), through the client layer's ``Informer``, with its error policy: an expired
  watch (410 Gone) is followed by a fresh list at once, any other failure by a fresh list
  after a backoff (1 s doubling to 30 s). A node leaves the watch (``DELETED``) when its
  label is removed, i.e. the repair finished or the fault cleared, or when the node itself
  is deleted (replaced); a fresh list reports the nodes that left while it was not watching.
- Work is tracked by pool, not only by node: a replacement brings a node with a new
  name, so "what is this pool waiting for" is the stable question. Each pool has one
  worker; its preparation steps run one at a time, so a job spread over the pool is not
  signalled twice at once, while pools proceed independently.
- Before approving, the node is read again; approval goes through
  ``autoclusters.ops.approval.approve_node``: only a node that still carries the required
  label is approved, and a node whose fault cleared meanwhile (label gone, or the
  admission layer answering "no longer needs a repair") counts as done.
- What it did is recorded three ways: an event on the node, an annotation on the node
  (``<domain>/approval-controller``), and a log line.
- A node the watch's handler raises on is that node's error alone (the informer's policy):
  logged with its name and counted; ``--metrics-port`` serves the count as
  ``autoclusters_informer_handler_errors_total{informer="nodes-needing-repair"}``, the name
  the controller uses too.

Run ``python approval_controller.py --help`` (or ``python -m approval_controller`` from
this directory); see README.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from autoclusters.api import ConsentMode
from autoclusters.clock import Clock, SystemClock, utc_iso
from autoclusters.kube import Kube, KubeError, NotFound, Unavailable, load_kube
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.kube.informer import Informer
from autoclusters.kube.informer_metrics import InformerMetrics
from autoclusters.names import Names
from autoclusters.ops.approval import ApprovalStatus, approve_node
from autoclusters.ops.resources import get_pool, labels_of

log = logging.getLogger("approval-controller")

COMPONENT = "autoclusters-approval-controller"
EVENT_PREPARED = "MaintenancePreparedAndApproved"
EVENT_PREPARATION_FAILED = "MaintenancePreparationFailed"
EVENT_NOT_NEEDED = "MaintenanceApprovalNotNeeded"
POOL_MODE_TTL = 10.0  # seconds a pool's consent mode is trusted before it is read again


@dataclass(frozen=True)
class Config:
    names: Names
    prepare: str  # a shell command; "" approves without a preparation step
    pools: frozenset[str] = frozenset()  # empty: every pool whose GpuNodePool says consentMode propose
    prepare_timeout: float = 600.0
    retry_after: float = 60.0  # a failed preparation is tried again after this long
    watch_timeout: int = 300


@dataclass
class PoolLedger:
    """What one pool is waiting for. Keys are node names; a replaced node simply leaves and a new one enters."""

    pool: str
    queued: set[str] = field(default_factory=set)
    approved: dict[str, str] = field(default_factory=dict)  # node -> when we (or someone) approved it
    failed: dict[str, str] = field(default_factory=dict)  # node -> why the preparation failed
    finished: int = 0  # approved nodes whose repair is over (label removed or node replaced)
    not_needed: int = 0  # nodes whose fault cleared before we approved

    def summary(self) -> str:
        return (f"pool {self.pool}: {len(self.queued)} queued, {len(self.approved)} approved and under repair, "
                f"{len(self.failed)} preparation failed, {self.finished} finished, {self.not_needed} not needed")


class ApprovalController:
    def __init__(self, kube: Kube, config: Config, clock: Clock) -> None:
        self.kube = kube
        self.config = config
        self.names = config.names
        self.clock = clock
        self.events = EventRecorder(kube, clock, COMPONENT)  # repeats within 10 min bump one event's count
        self.ledgers: dict[str, PoolLedger] = {}
        self._queues: dict[str, queue.Queue[str | None]] = {}
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._skipped: set[str] = set()
        self._modes: dict[str, tuple[float, str]] = {}  # pool -> (read at, consentMode); a short cache
        self.nodes = Informer(kube, "/api/v1/nodes", self._changed, name="nodes-needing-repair",
                              label_selector=f"{self.names.maintenance_required}=true",
                              watch_timeout=config.watch_timeout)

    # --- the watch ---------------------------------------------------------------------
    def run(self) -> None:
        """Lists, then watches (relisting as the informer's error policy says) until ``stop`` is called."""
        self.nodes.start()
        self._stop.wait()
        self.nodes.stop()

    def _changed(self, name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            self._observe(new)
        elif old is not None:
            self._left(name, old)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        for q in self._queues.values():
            q.put(None)

    def join(self, timeout: float = 10.0) -> None:
        for w in self._workers:
            w.join(timeout)

    # --- deciding what to do with a node --------------------------------------------------
    def _selected(self, pool: str) -> bool:
        if not pool:
            return False
        if self.config.pools:
            return pool in self.config.pools
        cached = self._modes.get(pool)
        if cached is None or self.clock.monotonic() - cached[0] > POOL_MODE_TTL:
            obj = get_pool(self.kube, self.names, pool)
            cached = (self.clock.monotonic(), str(((obj or {}).get("spec") or {}).get("consentMode", "")))
            self._modes[pool] = cached
        return cached[1] == ConsentMode.PROPOSE

    def _ledger(self, pool: str) -> PoolLedger:
        with self._lock:
            if pool not in self.ledgers:
                self.ledgers[pool] = PoolLedger(pool)
                q: queue.Queue[str | None] = queue.Queue()
                self._queues[pool] = q
                w = threading.Thread(target=self._work, args=(pool, q), name=f"pool-{pool}", daemon=True)
                self._workers.append(w)
                w.start()
            return self.ledgers[pool]

    def _observe(self, node: dict[str, Any]) -> None:
        name = str(node["metadata"]["name"])
        labels = labels_of(node)
        pool = labels.get(self.names.pool_label, "")
        try:
            selected = self._selected(pool)
        except KubeError as e:
            log.warning("cannot read pool %s for node %s (%s); will look again on the next change", pool, name, e)
            return
        if not selected:
            if name not in self._skipped:
                self._skipped.add(name)
                log.info("node %s (pool %s) needs a repair but its pool is not handled here; leaving it alone",
                         name, pool or "-")
            return
        ledger = self._ledger(pool)
        with self._lock:
            if labels.get(self.names.maintenance_approved) == "true":
                ledger.approved.setdefault(name, "before this controller saw it")
                ledger.queued.discard(name)
                return
            if name in ledger.queued or name in ledger.approved or name in ledger.failed:
                return
            ledger.queued.add(name)
        log.info("node %s in pool %s needs a repair; queued for preparation", name, pool)
        self._queues[pool].put(name)

    def _left(self, name: str, obj: dict[str, Any]) -> None:
        """The node no longer carries the required label, or it was deleted (replaced)."""
        pool = labels_of(obj).get(self.names.pool_label, "")
        self._skipped.discard(name)
        with self._lock:
            ledger = self.ledgers.get(pool)
            if ledger is None:
                return
            ledger.failed.pop(name, None)
            if ledger.approved.pop(name, None) is not None:
                ledger.finished += 1
                log.info("node %s left the repair queue (repaired or replaced); %s", name, ledger.summary())
            elif name in ledger.queued:
                log.info("node %s no longer needs a repair (its fault cleared); it will not be approved", name)

    # --- the per-pool worker -----------------------------------------------------------------
    def _work(self, pool: str, q: queue.Queue[str | None]) -> None:
        while True:
            name = q.get()
            if name is None or self._stop.is_set():
                return
            try:
                self._prepare_and_approve(pool, name)
            except Unavailable as e:
                log.warning("API server unavailable while handling %s (%s); retrying in %.0fs",
                            name, e, self.config.retry_after)
                self._requeue_later(pool, name)
            except Exception:
                log.exception("handling node %s failed; retrying in %.0fs", name, self.config.retry_after)
                self._requeue_later(pool, name)

    def _requeue_later(self, pool: str, name: str) -> None:
        def again() -> None:
            with self._lock:
                self.ledgers[pool].failed.pop(name, None)
                self.ledgers[pool].queued.discard(name)
            try:
                node = self.kube.get_node(name)
            except (NotFound, KubeError):
                return
            if labels_of(node).get(self.names.maintenance_required) == "true":
                self._observe(node)

        if not self._stop.is_set():
            t = threading.Timer(self.config.retry_after, again)
            t.daemon = True
            t.start()

    def _prepare_and_approve(self, pool: str, name: str) -> None:
        ledger = self.ledgers[pool]
        try:
            node = self.kube.get_node(name)
        except NotFound:
            node = None
        if node is None or labels_of(node).get(self.names.maintenance_required) != "true":
            self._done_not_needed(ledger, name, None, "the fault cleared before the preparation step ran")
            return
        env = {**os.environ, "AUTOCLUSTERS_NODE": name, "AUTOCLUSTERS_POOL": pool,
               **_fault_env(node, self.names)}
        rc, output = (0, "") if not self.config.prepare else run_shell(
            self.config.prepare, env, self.config.prepare_timeout)
        if rc != 0:
            why = f"preparation step exited {rc}: {output.strip()[-300:]}"
            with self._lock:
                ledger.queued.discard(name)
                ledger.failed[name] = why
            log.warning("node %s (pool %s): %s; not approving, will try again in %.0fs",
                        name, pool, why, self.config.retry_after)
            self._event(node, EVENT_PREPARATION_FAILED, f"not approved: {why}", warning=True)
            self._requeue_later(pool, name)
            return
        result = approve_node(self.kube, self.names, name)
        now = utc_iso(self.clock.now())
        if result.status in {ApprovalStatus.APPROVED, ApprovalStatus.ALREADY_APPROVED}:
            with self._lock:
                ledger.queued.discard(name)
                ledger.approved[name] = now
            what = "prepared and approved" if result.status == ApprovalStatus.APPROVED else "prepared; already approved"
            msg = f"{what} by {COMPONENT} at {now}" + (f" (preparation: {self.config.prepare})"
                                                       if self.config.prepare else "")
            self._annotate(name, f"{result.status.value} {now}")
            self._event(node, EVENT_PREPARED, msg)
            log.info("node %s (pool %s): %s; %s", name, pool, what, ledger.summary())
        elif result.status in {ApprovalStatus.NOT_NEEDED, ApprovalStatus.NOT_FOUND}:
            self._done_not_needed(ledger, name, node, result.message)
        else:
            with self._lock:
                ledger.queued.discard(name)
                ledger.failed[name] = result.message
            log.error("node %s (pool %s): approval failed: %s", name, pool, result.message)
            self._event(node, EVENT_PREPARATION_FAILED, f"approval failed: {result.message}", warning=True)
            self._requeue_later(pool, name)

    def _done_not_needed(self, ledger: PoolLedger, name: str, node: dict[str, Any] | None, why: str) -> None:
        with self._lock:
            ledger.queued.discard(name)
            ledger.not_needed += 1
        log.info("node %s (pool %s): done, no approval needed: %s", name, ledger.pool, why)
        if node is not None:
            self._event(node, EVENT_NOT_NEEDED, f"no approval given: {why}")

    # --- records ---------------------------------------------------------------------------
    def _annotate(self, name: str, value: str) -> None:
        key = f"{self.names.domain}/approval-controller"
        try:
            self.kube.patch_node(name, {"metadata": {"annotations": {key: value}}})
        except KubeError as e:
            log.warning("could not annotate node %s: %s", name, e)

    def _event(self, node: dict[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        meta = node["metadata"]
        self.events.emit(ObjectRef("Node", meta["name"], uid=meta.get("uid", "")), reason, message, warning=warning)


def _fault_env(node: dict[str, Any], names: Names) -> dict[str, str]:
    """The fault the node reports, for the preparation step (empty when only the label says so)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") in names.fault_conditions and c.get("status") == "True":
            return {"AUTOCLUSTERS_FAULT_CONDITION": str(c.get("type", "")),
                    "AUTOCLUSTERS_FAULT_REASON": str(c.get("reason", "")),
                    "AUTOCLUSTERS_FAULT_MESSAGE": str(c.get("message", ""))}
    return {}


def run_shell(command: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    try:
        res = subprocess.run(command, shell=True, env=env, timeout=timeout, capture_output=True, text=True,
                             check=False)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f}s"
    return res.returncode, (res.stdout or "") + (res.stderr or "")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG or in-cluster)")
    p.add_argument("--prepare", default="", metavar="COMMAND",
                   help="shell command run before each approval; it gets AUTOCLUSTERS_NODE, AUTOCLUSTERS_POOL and "
                        "AUTOCLUSTERS_FAULT_{CONDITION,REASON,MESSAGE} in its environment; exit 0 to approve")
    p.add_argument("--pool", action="append", default=[], metavar="POOL",
                   help="handle this pool (repeatable; default: every pool whose GpuNodePool has consentMode propose)")
    p.add_argument("--prepare-timeout", type=float, default=600.0, metavar="SECONDS")
    p.add_argument("--retry-after", type=float, default=60.0, metavar="SECONDS",
                   help="try a failed preparation again after this long (default 60)")
    p.add_argument("--watch-timeout", type=int, default=300, metavar="SECONDS", help=argparse.SUPPRESS)
    p.add_argument("--domain", default=None, help="label domain (default: $AUTOCLUSTERS_DOMAIN or autoclusters.io)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics (the watch's handler errors) on this port (default: 0, off)")
    p.add_argument("--metrics-address", default="0.0.0.0", help="address for --metrics-port (default: 0.0.0.0)")
    return p.parse_args(argv)


def metrics_registry(controller: ApprovalController) -> CollectorRegistry:
    """The watch's handler errors, under the name every autoclusters process with informers exports."""
    registry = CollectorRegistry()
    registry.register(InformerMetrics(lambda: (controller.nodes,)))
    return registry


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    env_names = Names.from_env()
    names = Names(domain=args.domain, prefix=env_names.prefix) if args.domain else env_names
    config = Config(names=names, prepare=args.prepare, pools=frozenset(args.pool),
                    prepare_timeout=args.prepare_timeout, retry_after=args.retry_after,
                    watch_timeout=args.watch_timeout)
    try:
        kube = load_kube(args.kubeconfig, user_agent=COMPONENT)
    except KubeError as e:
        log.error("%s", e)
        return 3
    controller = ApprovalController(kube, config, SystemClock())
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, addr=args.metrics_address, registry=metrics_registry(controller))
        except OSError as e:
            log.error("cannot serve metrics on %s:%d: %s", args.metrics_address, args.metrics_port, e)
            return 2

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        controller.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scope = ", ".join(sorted(config.pools)) if config.pools else "every pool in propose mode"
    log.info("approval controller started for %s; preparation step: %s", scope, config.prepare or "(none)")
    watcher = threading.Thread(target=controller.run, name="watch", daemon=True)
    watcher.start()
    while watcher.is_alive() and not controller.stopped:
        time.sleep(0.5)
    controller.stop()
    controller.join(timeout=5)
    for ledger in controller.ledgers.values():
        log.info("%s", ledger.summary())
    if controller.nodes.handler_errors:
        log.warning("the watch's handler failed %d times (each logged above with its node)",
                    controller.nodes.handler_errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
