"""Runs the controller: leader election, informers, the work queue and its workers,
periodic resync and garbage collection of old records.

Only the leader watches and acts. A replica that loses the lease stops its workers at
once (``run`` returns ``False``); the CLI then exits non-zero and its supervisor restarts
it as a follower, the way client-go controllers behave.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from autoclusters import allow_lists, api
from autoclusters.clock import Clock, SystemClock
from autoclusters.controller import remediation_record as rec
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.cache import POOL_KEY, Fleet
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.controller.controller_metrics import Metrics
from autoclusters.controller.hook import HookRunner
from autoclusters.controller.notifier import LogNotifier, Notifier, WebhookNotifier
from autoclusters.controller.reconciler import Reconciler, Settings
from autoclusters.controller.shards import LayoutGuard, Shard, lease_name
from autoclusters.controller.statemachine import RepairPolicy
from autoclusters.controller.storage_migration import migrate_storage
from autoclusters.controller.webhook_certs import WebhookCertKeeper
from autoclusters.deploy.workloads import webhook_certificate_hosts
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube import Kube, KubeError, NotFound
from autoclusters.kube.events import EventRecorder
from autoclusters.kube.fence import LeaseFence
from autoclusters.kube.leader import LeaderElector
from autoclusters.kube.request_counter import LEADER_ELECTION
from autoclusters.kube.workqueue import WorkQueue
from autoclusters.names import Names
from autoclusters.repeats import RepeatedErrors

log = logging.getLogger(__name__)
# Threads writing events beside the reconciles (one object's events always on the same one).
EVENT_SENDERS = 4


def expired(records: list[dict[str, Any]], now: datetime, retention_days: float) -> list[str]:
    """Closed records whose repair ended longer ago than the retention; active ones never."""
    cutoff = now - timedelta(days=retention_days)
    out = []
    for r in records:
        try:
            s = rec.state_of(r)
        except rec.UnreadableRecord:
            continue  # left as it is (reported by the node's reconcile and a metric), never collected
        if s is not None and not rec.is_active(r) and s.completed is not None and s.completed < cutoff:
            out.append(r["metadata"]["name"])
    return out


class Controller:
    def __init__(self, kube: Kube, config: ControllerConfig, *, names: Names | None = None,
                 clock: Clock | None = None, notifier: Notifier | None = None) -> None:
        self.config = config.with_identity()
        self.names = names or Names()
        self.clock = clock or SystemClock()
        # Every write of this controller goes through this client or a view of it, so every
        # write is fenced by the lease (kube/fence.py); only the election's client is not.
        self.fence = LeaseFence(self.clock)
        # The lease's requests never wait out a Retry-After either: a renewal held past the renew
        # deadline would leave this replica acting on a lease that is running out; failing at
        # once, the elector tries again each retry period and steps down at the deadline.
        election = kube.unfenced().for_component(LEADER_ELECTION, throttle_retries=0)
        kube = kube.fenced(self.fence)
        self.kube = kube
        self.shard = Shard(self.config.shards, self.config.shard)
        self.metrics = Metrics()
        self.metrics.shard.labels(str(self.shard.shard), str(self.shard.shards)).set(1)
        self.metrics.count_requests(kube.requests.snapshot, kube.requests.snapshot_throttled)
        self.metrics.count_fenced(lambda: self.fence.refused)
        self.queue = WorkQueue(monotonic=self.clock.monotonic)
        self.stop_event = threading.Event()
        catalog = load_catalog(self.config.catalog_path or None)
        delay = self.config.pool_status_delay_seconds
        self.fleet = Fleet(kube, self.names, catalog, self.queue.add, namespace=self.config.namespace,
                           enqueue_pool=lambda key: self.queue.add(key, delay),
                           shard=self.shard, gather_seconds=self.config.watch_gather_seconds,
                           watch_seconds=self.config.watch_seconds)
        self.metrics.informer_counts.informers = self.fleet.informers
        self.metrics.open_repairs.records = lambda: [r for r in self.fleet.record_informer.items()
                                                     if self.fleet.owns_pool((r.get("spec") or {}).get("pool", ""))]
        self.metrics.open_repairs.now = self.clock.now
        self.recorder = EventRecorder(kube, self.clock, self.config.event_source, instance=self.config.identity,
                                      background=True, senders=EVENT_SENDERS)
        if notifier is None:
            notifier = WebhookNotifier(self.config.notifier_url) if self.config.notifier_url else LogNotifier()
        c = self.config
        lists = allow_lists.from_config(c.allow_lists, allow_lists.FLAG)
        self.actuator = Actuator(kube, self.names, self.recorder, notifier, clock=self.clock,
                                 hooks=HookRunner(requeue=self.queue.add, lists=lists))
        policy = RepairPolicy(verify_timeout_seconds=c.verify_timeout_seconds,
                        operation_timeout_seconds=c.operation_timeout_seconds, poll_seconds=c.poll_seconds,
                        hold_recheck_seconds=c.hold_recheck_seconds,
                        approval_label=self.names.maintenance_approved)
        self.reconciler = Reconciler(kube, self.clock, self.fleet, self.actuator, self.recorder, self.metrics,
                                     Settings(policy, sim_reset_seconds=c.sim_reset_seconds,
                                              sim_replace_seconds=c.sim_replace_seconds, namespace=c.namespace,
                                              image=c.provider_image,
                                              image_pull_secrets=tuple(s for s in c.image_pull_secrets.split(",") if s),
                                              host_reboot_command=api.host_reboot_argv(c.host_reboot_command),
                                              allow_lists=lists))
        self.layouts = LayoutGuard(election, self.clock, namespace=c.namespace, base=c.lease_name, shards=c.shards)
        self.elector = LeaderElector(election, self.clock, namespace=c.namespace,
                                     name=lease_name(c.lease_name, c.shards, c.shard), identity=c.identity,
                                     lease_seconds=c.lease_seconds, renew_deadline=c.renew_deadline_seconds,
                                     retry_period=c.retry_period_seconds, may_acquire=self.layouts.may_lead,
                                     fence=self.fence)
        # One keeper of the webhook's certificate per installation: shard 0's leader.
        self.webhook_certs = (WebhookCertKeeper(
            kube, self.clock, namespace=c.namespace, tls_secret=c.webhook_tls_secret, ca_secret=c.webhook_ca_secret,
            config_name=c.webhook_config,
            hosts=[h for h in c.webhook_hosts.split(",") if h] or webhook_certificate_hosts(c.namespace),
            policy=c.webhook_cert_policy()) if c.webhook_tls_secret and self.shard.shard == 0 else None)
        self._threads: list[threading.Thread] = []
        self.lost_leadership = False
        self._node_reconciles = self.metrics.reconciles.labels("node")
        self._pool_reconciles = self.metrics.reconciles.labels("pool")

    # --- lifecycle ------------------------------------------------------------------------------
    def run(self) -> bool:
        """Blocks until ``stop()`` (returns True) or the lease is lost (returns False)."""
        if self.config.metrics_port:
            self.metrics.serve(self.config.metrics_port)
        self.elector.run(self.stop_event, self._start_leading, self._stop_leading)
        self._shutdown()
        return not self.lost_leadership

    def stop(self) -> None:
        self.stop_event.set()

    def _start_leading(self) -> None:
        self.metrics.is_leader.set(1)
        self.fleet.start()
        # The caches just listed (every node, pool and record) live as long as the controller:
        # out of the cyclic collector's generations, so its full collections do not walk them
        # again and again; objects that replace them later are collected as usual.
        gc.freeze()
        for i in range(max(1, self.config.workers)):
            t = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        loops = [(self._resync_loop, "resync"), (self._gc_loop, "gc")]
        if self.webhook_certs is not None:
            loops.append((self._webhook_cert_loop, "webhook-certs"))
        if self.shard.shard == 0:  # once per installation, beside the work (controller/storage_migration.py)
            loops.append((self._migrate_storage, "storage-migration"))
        for target, name in loops:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _migrate_storage(self) -> None:
        migrate_storage(self.kube, self.names, self.recorder)

    def _stop_leading(self) -> None:
        self.metrics.is_leader.set(0)
        if not self.stop_event.is_set():
            self.lost_leadership = True
        self.stop_event.set()
        self.queue.close()

    def _shutdown(self) -> None:
        self.queue.close()
        if self.lost_leadership:
            # Nothing more may be written (every write is fenced) and a thread may hang on a
            # request sent before the loss (a black-holed network): no flush, no joins; the CLI
            # exits at once for its supervisor to restart it.
            self.actuator.hooks.close()
            return
        self.actuator.hooks.close()
        self.recorder.flush()
        self.fleet.stop()
        for t in self._threads:
            t.join(timeout=5)
        if not self.lost_leadership:
            self.elector.release()

    # --- workers ----------------------------------------------------------------------------------
    def _worker(self) -> None:
        # Blocks in the queue until a key is due; stopping closes the queue, which wakes every worker.
        while not self.stop_event.is_set():
            key = self.queue.get()
            if key is None:
                return  # the queue was closed
            self.metrics.queue_depth.set(self.queue.depth())
            try:
                if not self.elector.is_leader:
                    continue
                (self._pool_reconciles if key.startswith(POOL_KEY) else self._node_reconciles).inc()
                after = self.reconciler.reconcile(key)
                self.queue.forget(key)
                if after is not None:
                    self.queue.add(key, after)
            except KubeError as e:
                # never sooner than the server asked (a throttled request's Retry-After)
                delay = self.queue.backoff(key, at_least=e.retry_after or 0.0)
                self.metrics.reconcile_errors.inc()
                log.warning("reconcile %s failed (%s); retrying in %.2fs", key, e, delay)
            except Exception:
                delay = self.queue.backoff(key)
                self.metrics.reconcile_errors.inc()
                log.exception("reconcile %s crashed; retrying in %.2fs", key, delay)
            finally:
                self.queue.done(key)

    def _resync_loop(self) -> None:
        while not self.stop_event.wait(self.config.resync_seconds):
            self.resync()

    def resync(self) -> None:
        """Level-triggered safety net: every key is looked at again now and then, and each pool's
        provider condition asks about every member again (between resyncs, only about the
        members that changed)."""
        owns = self.fleet.owns
        for node in self.fleet.node_informer.items():
            if owns(name := node["metadata"]["name"]):
                self.queue.add(name)
        for r in self.fleet.record_informer.items():
            if rec.is_active(r) and self.fleet.owns_pool(r["spec"].get("pool", "")):
                self.queue.add(r["spec"]["node"])
        self.reconciler.pool_reconciler.recheck_providers()
        for pool in list(self.fleet.pools):
            if self.fleet.owns_pool(pool):
                self.queue.add(POOL_KEY + pool)

    def _gc_loop(self) -> None:
        self._every(self.config.gc_interval_seconds, "garbage collection", self.collect_garbage)

    def _webhook_cert_loop(self) -> None:
        assert self.webhook_certs is not None
        self._every(self.config.webhook_cert_check_seconds, "the webhook's certificate check", self.webhook_certs.sync)

    def _every(self, seconds: float, what: str, call: Callable[[], object]) -> None:
        """``call`` now and then every ``seconds`` until the controller stops; a failure is that
        round's alone (an API error logged in one line, a bug of ours with a traceback once)."""
        bugs = RepeatedErrors()
        while not self.stop_event.is_set():
            try:
                call()
            except KubeError as e:
                log.warning("%s failed: %s; trying again in %gs", what, e, seconds)
            except Exception as e:
                if bugs.is_new("", e):
                    log.exception("%s failed; trying again in %gs", what, seconds)
                else:
                    log.warning("%s failed again: %r", what, e)
            else:
                bugs.succeeded("")
            if self.stop_event.wait(seconds):
                return

    def collect_garbage(self) -> int:
        """Deletes closed records of this shard's pools older than the retention; returns how many."""
        deleted = 0
        records = [r for r in self.fleet.record_informer.items()
                   if self.fleet.owns_pool((r.get("spec") or {}).get("pool", ""))]
        for name in expired(records, self.clock.now(), self.config.retention_days):
            try:
                self.kube.delete(Kube.custom_path(self.names.api_group, api.VERSION, api.REMEDIATIONS.plural, name))
                deleted += 1
            except NotFound:
                pass
            except KubeError as e:
                log.warning("record %s not collected: %s", name, e)
        if deleted:
            log.info("collected %d remediation records older than %g days", deleted, self.config.retention_days)
        return deleted
