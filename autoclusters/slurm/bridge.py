"""The Slurm bridge: keeps Slurm in step with the repairs of the nodes of Slurm-enabled pools.

Two informers (``kube.informer``: the project's one list-watch and its error policy) keep
the pools and the nodes in memory; every ``poll_seconds`` it takes the pools with
``spec.slurm.enabled``, their nodes, and the Slurm nodes they map to (one ``sinfo`` for
all; Slurm has nothing to watch), and for each node calls the pure ``decisions.decide`` and
carries out its actions: ``scontrol``/``scancel`` on the Slurm
side, one merge patch of our own annotation keys (the ack, the cordon marker) on the
Kubernetes side, and events on the node. A failing node (a Slurm command that times out,
a patch that is refused) is reported on that node and retried at the next poll; it never
stops the others, and neither does an unexpected error on one node (logged with the node's
name, counted in ``stats.node_errors``). A whole poll that fails (the API server or ``sinfo``, or
an unexpected error outside the per-node part: reading the pools, matching nodes to them) never
ends the bridge either: it is logged (an unexpected error with its traceback when it is new, in
one line while it repeats), counted in ``stats.poll_errors``, and the next poll comes
``poll_seconds`` later after the first failed poll, the wait doubling with each next one in a
row up to ``max_backoff_seconds`` (never below ``poll_seconds``), and ``poll_seconds`` again once a
poll succeeds. A node it patched goes back into the informer's store at once, so the next poll
never acts on an older copy than the one it wrote.

What it did during a repair (which jobs it signalled, when, which it requeued) is kept in
memory and written on the node (annotation ``<domain>/slurm-jobs``, removed after the
repair), so a bridge restarted during a repair carries on: it neither signals a job twice
nor forgets to requeue a job that ended after its signal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from autoclusters import api
from autoclusters.clock import Clock, SystemClock, parse_iso
from autoclusters.controller.remediation_record import is_active
from autoclusters.kube import Kube, KubeError
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.kube.informer import Informer
from autoclusters.names import SLURM_ACKNOWLEDGER, Names
from autoclusters.pools.membership import Membership
from autoclusters.pools.pool_config import PoolConfig
from autoclusters.pools.slurm_policy import SignalTarget
from autoclusters.repeats import RepeatedErrors
from autoclusters.slurm import decisions as d
from autoclusters.slurm.commands import Slurm, SlurmError, SlurmJob

log = logging.getLogger(__name__)


def _ignore(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """The bridge reads the stores at each poll; it needs no callback per change."""
ACKNOWLEDGER = SLURM_ACKNOWLEDGER  # the name a pool lists in preDrain.acknowledgers
UNBACKED_GRACE = timedelta(seconds=30)  # a drain warning no record backs is reported after this


@dataclass
class BridgeStats:
    """What the bridge did, for its log, its tests and its metrics (``slurm/bridge_metrics.py``)."""

    polls: int = 0
    actions: int = 0
    poll_errors: int = 0  # whole polls that failed (the API server or sinfo)
    node_errors: int = 0  # one node's sync that failed (the log names the node); the others went on
    last_error: str = ""

    @property
    def errors(self) -> int:
        return self.poll_errors + self.node_errors


@dataclass
class SlurmBridge:
    kube: Kube
    slurm: Slurm
    names: Names = field(default_factory=Names)
    clock: Clock = field(default_factory=SystemClock)
    poll_seconds: float = 2.0
    max_backoff_seconds: float = 30.0  # the longest wait after whole polls that failed in a row
    recorder: EventRecorder | None = None
    memory: dict[str, d.Memory] = field(default_factory=dict)
    stats: BridgeStats = field(default_factory=BridgeStats)

    def __post_init__(self) -> None:
        if self.recorder is None:
            self.recorder = EventRecorder(self.kube, self.clock, "autoclusters-slurm-bridge")
        self._stop = threading.Event()
        self._node_bugs = RepeatedErrors()  # per node: its sync's unexpected error
        self._poll_bugs = RepeatedErrors()  # the poll's outside the per-node part (one key, "")
        self._failed_in_a_row = 0  # whole polls that failed since the last that succeeded
        # per node: the unbacked warning seen (record, deadline), since when, and whether reported
        self._unbacked: dict[str, tuple[tuple[str, str], datetime, bool]] = {}
        self.pools = Informer(self.kube, Kube.custom_path(self.names.api_group, api.VERSION, api.POOLS.plural),
                              _ignore, name=api.POOLS.plural)
        self.nodes = Informer(self.kube, "/api/v1/nodes", _ignore, name="nodes")
        # The Remediation records, against which a drain warning on a node is checked before the
        # bridge acts on it: the node's annotations alone can be forged by anyone who may patch it.
        self.records = Informer(self.kube, Kube.custom_path(self.names.api_group, api.VERSION,
                                                            api.REMEDIATIONS.plural), _ignore,
                                name=api.REMEDIATIONS.plural)

    @property
    def informers(self) -> tuple[Informer, ...]:
        return self.pools, self.nodes, self.records

    @property
    def cordon_marker(self) -> str:
        """Node annotation: the bridge cordoned this node for an external Slurm drain."""
        return self.names.slurm_cordoned

    # --- loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            while not informer.synced.wait(5.0) and not self._stop.is_set():
                log.info("slurm bridge: waiting for the first list of %s", informer.name)
        while not self._stop.is_set():
            self._stop.wait(self.poll())
        for informer in self.informers:
            informer.stop()

    def poll(self) -> float:
        """One poll (``sync_once``) whose failure is caught (see the module's policy); returns the
        seconds to wait before the next."""
        try:
            self.sync_once()
        except (KubeError, SlurmError) as e:  # the whole poll failed (API server or sinfo): retry
            wait = self._failed(str(e))
            log.warning("slurm bridge poll failed: %s; polling again in %.1fs", e, wait)
        except Exception as e:  # a bug outside the per-node part must not end the bridge
            wait = self._failed(repr(e))
            if self._poll_bugs.is_new("", e):  # the traceback once, not at every poll
                log.exception("slurm bridge poll: unexpected error; polling again in %.1fs", wait)
            else:
                log.warning("slurm bridge poll: the same unexpected error again: %r; polling again in %.1fs",
                            e, wait)
        else:
            self._failed_in_a_row = 0
            self._poll_bugs.succeeded("")
            return self.poll_seconds
        return wait

    def _failed(self, error: str) -> float:
        """Counts a whole poll that failed; returns the wait before the next poll: ``poll_seconds``
        after the first failure in a row, doubling with each next one up to ``max_backoff_seconds``,
        and never shorter than ``poll_seconds`` (a bridge that polls less often than the longest
        backoff must not poll a failing API server or slurmctld more often than a healthy one)."""
        self.stats.poll_errors += 1
        self.stats.last_error = error
        self._failed_in_a_row += 1
        backoff = min(self.poll_seconds * 2 ** min(self._failed_in_a_row - 1, 20), self.max_backoff_seconds)
        return max(self.poll_seconds, backoff)

    def stop(self) -> None:
        self._stop.set()

    def sync_once(self) -> None:
        self.stats.polls += 1
        membership, invalid = Membership.from_objects(self.pools.items(), self.names)
        for pool_name, error in invalid.items():  # the controller reports a bad pool on the pool itself
            log.debug("slurm bridge: skipping pool %s: %s", pool_name, error)
        pools = {p.name: p for p in membership.pools if p.slurm.enabled}
        if not pools:
            return
        members: list[tuple[dict[str, Any], PoolConfig, str]] = []
        for node in self.nodes.items():
            pool = pools.get(membership.pool_of(node) or "")
            if pool is None:
                continue
            slurm_name = pool.slurm.slurm_node_name(node)
            if slurm_name:
                members.append((node, pool, slurm_name))
        if not members:
            return
        slurm_nodes = self.slurm.nodes(name for _, _, name in members)
        seen = set()
        for node, pool, slurm_name in members:
            name = node["metadata"]["name"]
            seen.add(name)
            try:
                self._sync_node(node, pool, slurm_name, slurm_nodes.get(slurm_name))
            except (KubeError, SlurmError) as e:
                self.stats.node_errors += 1
                self.stats.last_error = f"{name}: {e}"
                log.warning("slurm bridge: node %s: %s", name, e)
                self._event(node, d.Report(f"error:{e}", d.EVENT_FAILED, str(e), warning=True))
            except Exception as e:  # a bug on this node is this node's alone: the others go on
                self.stats.node_errors += 1
                self.stats.last_error = f"{name}: {e!r}"
                if self._node_bugs.is_new(name, e):  # the traceback once, not at every poll
                    log.exception("slurm bridge: node %s: unexpected error; the other nodes go on, this one "
                                  "is looked at again at the next poll", name)
                else:
                    log.warning("slurm bridge: node %s: the same unexpected error again: %r", name, e)
            else:
                self._node_bugs.succeeded(name)
        for gone in set(self.memory) - seen:
            del self.memory[gone]
        for gone in set(self._unbacked) - seen:
            del self._unbacked[gone]
        self._node_bugs.keep_only(seen)

    # --- one node ------------------------------------------------------------------------------
    def warning(self, node: Mapping[str, Any]) -> d.Repair | None:
        """The controller's drain warning on ``node``, when the Remediation record it names backs
        it: the record is this node's, still open, and holds the same pre-drain deadline (the
        deadline is the record's). None when there is no warning or nothing backs it."""
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        deadline = parse_iso(ann.get(self.names.drain_deadline))
        if deadline is None:
            return None
        name = ann.get(self.names.remediation, "")
        record = self.records.get(name) if name else None
        if (record is None or (record.get("spec") or {}).get("node") != meta.get("name") or not is_active(record)
                or parse_iso((record.get("status") or {}).get("preDrainDeadline")) != deadline):
            return None
        return d.Repair(record=name, reason=ann.get(self.names.drain_reason, "") or "repair", deadline=deadline)

    def observe(self, node: Mapping[str, Any], slurm_name: str, slurm_node: Any) -> d.SlurmObservation:
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        repair = self.warning(node)
        mem = self.memory.get(meta["name"], d.Memory())
        jobs: tuple[SlurmJob, ...] = ()
        signalled: dict[str, SlurmJob] = {}
        if repair is not None and slurm_node is not None:
            jobs = tuple(self.slurm.jobs_on(slurm_name))
            if mem.record == repair.record and mem.signalled:
                signalled = self.slurm.jobs(mem.signalled)
        return d.SlurmObservation(
            node=meta["name"], slurm_name=slurm_name, now=self.clock.now(), repair=repair,
            maintenance_required=labels.get(self.names.maintenance_required) == "true",
            ack=ann.get(self.names.drain_ack(ACKNOWLEDGER), ""),
            cordoned=bool((node.get("spec") or {}).get("unschedulable")),
            cordoned_by_us=ann.get(self.cordon_marker) == "true",
            external_note=ann.get(self.names.slurm_external_drain, ""),
            slurm=slurm_node, jobs_on_node=jobs, signalled_jobs=signalled)

    def _sync_node(self, node: dict[str, Any], pool: PoolConfig, slurm_name: str, slurm_node: Any) -> None:
        name = node["metadata"]["name"]
        ann = (node.get("metadata") or {}).get("annotations") or {}
        warning = self.warning(node)
        record = warning.record if warning is not None else ""
        mem = self.memory.setdefault(name, d.Memory())
        self._report_unbacked(node, warning)
        saved = ann.get(self.names.slurm_jobs)
        if record and mem.record != record:
            # A bridge restarted during this repair carries on from what it wrote on the node.
            restored = d.Memory.from_json(saved) if saved else None
            mem = restored if restored is not None and restored.record == record else d.Memory(record=record)
            self.memory[name] = mem
        elif not record and saved:
            self._patch_node(name, {"metadata": {"annotations": {self.names.slurm_jobs: None}}})
        obs = self.observe(node, slurm_name, slurm_node)
        if slurm_node is None or not slurm_node.drain or d.ours(slurm_node):
            mem.reported = {k for k in mem.reported if not k.startswith("external:")}
        for action in d.decide(obs, mem, pool.slurm):
            self._do(node, slurm_name, action, mem, pool)

    def _report_unbacked(self, node: Mapping[str, Any], warning: d.Repair | None) -> None:
        """A drain warning that no record backs is refused at once, and reported (a Warning event,
        once per warning) when it stays so for ``UNBACKED_GRACE``: the controller writes the
        warning and then the record's status, so a real one is unbacked for a moment."""
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        stamp = ann.get(self.names.drain_deadline)
        if warning is not None or not stamp:
            self._unbacked.pop(meta.get("name", ""), None)
            return
        key = (ann.get(self.names.remediation, ""), stamp)
        seen = self._unbacked.get(meta["name"])
        now = self.clock.now()
        if seen is None or seen[0] != key:
            self._unbacked[meta["name"]] = (key, now, False)
        elif not seen[2] and now - seen[1] >= UNBACKED_GRACE:
            self._unbacked[meta["name"]] = (key, seen[1], True)
            self._event(node, d.Report(f"unbacked:{key[0]}", d.EVENT_UNBACKED,
                                       f"ignored the drain warning on the node (deadline {stamp}): no open "
                                       f"Remediation record of this node ({key[0] or 'none named'}) holds it",
                                       warning=True))

    def _do(self, node: dict[str, Any], slurm_name: str, action: d.SlurmEffect, mem: d.Memory,
            pool: PoolConfig) -> None:
        name = node["metadata"]["name"]
        self.stats.actions += 1
        now = self.clock.now()
        if isinstance(action, d.Forget):
            self.memory[name] = d.Memory(reported=mem.reported)
        elif isinstance(action, d.SlurmDrain):
            self.slurm.drain(slurm_name, action.reason)
            self._event(node, d.Report("", d.EVENT_DRAINED, f"drained Slurm node {slurm_name}: {action.reason!r}"))
        elif isinstance(action, d.Signal):
            job = action.job
            if action.signal:
                self.slurm.signal(job.job_id, action.signal, SignalTarget(pool.slurm.signal_to))
            mem.signalled[job.job_id] = now
            mem.restarts_at_signal[job.job_id] = job.restarts
            self._save(name, mem)
            lead = pool.slurm.signal_lead_seconds
            what = f"sent SIG{action.signal} to" if action.signal else "no signal configured for"
            self._event(node, d.Report("", d.EVENT_SIGNALLED, f"{what} Slurm job {job.job_id} on {slurm_name}; "
                                                              f"requeue in {lead}s at the latest"))
        elif isinstance(action, d.Requeue):
            self.slurm.requeue(action.job_id)
            mem.requeued.add(action.job_id)
            self._save(name, mem)
            self._event(node, d.Report("", d.EVENT_REQUEUED, f"requeued Slurm job {action.job_id}: {action.why}"))
        elif isinstance(action, d.Ack):
            self._patch_node(name, {"metadata": {"annotations": {self.names.drain_ack(ACKNOWLEDGER):
                                                                     action.record}}})
            self._event(node, d.Report("", d.EVENT_READY, f"Slurm node {slurm_name} is DRAINED and its jobs are "
                                                          f"requeued; acknowledged repair {action.record}"))
        elif isinstance(action, d.Resume):
            self.slurm.resume(slurm_name)
            self._event(node, d.Report("", d.EVENT_RESUMED, f"resumed Slurm node {slurm_name} "
                                                            f"(cleared {action.reason!r})"))
        elif isinstance(action, d.Report):
            mem.reported.add(action.key)
            self._event(node, action)
        elif isinstance(action, d.Note):
            self._patch_node(name, {"metadata": {"annotations": {
                self.names.slurm_external_drain: action.text or None}}})
        elif isinstance(action, d.KubeCordon):
            patch: dict[str, Any] = {"spec": {"unschedulable": action.cordon},
                                     "metadata": {"annotations": {self.cordon_marker: "true" if action.cordon
                                                                  else None}}}
            self._patch_node(name, patch)

    def _patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.nodes.upsert(self.kube.patch_node(name, body))

    def _save(self, name: str, mem: d.Memory) -> None:
        self._patch_node(name, {"metadata": {"annotations": {self.names.slurm_jobs: mem.to_json()}}})

    def _event(self, node: Mapping[str, Any], report: d.Report) -> None:
        meta = node.get("metadata") or {}
        log.info("node %s: %s: %s", meta.get("name"), report.reason, report.message)
        assert self.recorder is not None
        self.recorder.emit(ObjectRef("Node", meta.get("name", ""), uid=meta.get("uid", "")), report.reason,
                           report.message, warning=report.warning)
