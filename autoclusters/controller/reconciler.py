"""One reconcile of one node, in a fixed order (see docs/workflow.md):

1. look: one ``Snapshot`` of everything the reconcile needs, gathered up front: the node,
   its pool and its Remediation records from the informer cache, the node's pods (one list,
   only when the decision needs them, made before the pool's lock), and from them the
   ``Observation`` (fault, node health, pool guards, history, provider progress);
2. decide: ``statemachine.transition`` on the snapshot — the only place a phase changes;
3. persist: create the record, or patch its status with its resourceVersion as a
   precondition (an empty diff is skipped; a Conflict means another writer won: requeue);
4. act: carry out the plan (only after the state that asked for it is stored), with the
   snapshot's node and pods: nothing is read again;
5. requeue-after what the state machine asked for.

A repair that has not started yet is decided under its pool's lock, on a second look at
the cache taken under it (the concurrency guard must judge the present); the pods listed
before the lock are reused.

Pools are reconciled under the key ``pool:<name>``, by ``pool_reconciler.PoolReconciler``
(their status, conditions and circuit breaker); ``reconcile`` routes a key to one or the other.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from autoclusters import api, pool_fields
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.api import IN_PROGRESS, TERMINAL, Phase
from autoclusters.clock import Clock
from autoclusters.controller import breaker as brk
from autoclusters.controller import drain as drainrules
from autoclusters.controller import messages as words
from autoclusters.controller import remediation_record as rec
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.cache import POOL_KEY, Fleet
from autoclusters.controller.controller_metrics import Metrics
from autoclusters.controller.pool_policy import Pool
from autoclusters.controller.pool_reconciler import PoolReconciler, breaker_reading
from autoclusters.controller.record_index import PRE_START
from autoclusters.controller.statemachine import (
    HOLD_NO_PROVIDER,
    HOLD_NOT_ALLOW_LISTED,
    HOLD_PROVIDER_INVALID,
    HOLD_PROVIDER_REFUSED,
    ClearWarning,
    Decision,
    Fault,
    HistoryView,
    NodeView,
    Observation,
    Outcome,
    PodsView,
    PoolView,
    ProviderBlock,
    RepairPolicy,
    RepairState,
    Unmark,
    transition,
)
from autoclusters.deploy.providers import (
    ProviderSettingsError,
    ProviderSpec,
    parse_provider_choice,
)
from autoclusters.kube import Conflict, Kube, KubeError, NotFound
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.kube.objects import node_ready
from autoclusters.memo import ObjectMemo
from autoclusters.names import EVENT_RECORD_UNREADABLE
from autoclusters.providers.actions import ACTIONS, Proof
from autoclusters.providers.base import NodeCache, Provider, ProviderError
from autoclusters.providers.registry import BuildContext, build_provider
from autoclusters.providers.replacement import ReplacementClaims
from autoclusters.providers.types import Operation, ProviderState, ProviderView

log = logging.getLogger(__name__)

JSON = dict[str, Any]
_UNREADABLE_MAX = 1024  # unreadable records remembered as reported (a handful in practice)
_PER_POOL_OBJECT_MAX = 1024  # answers kept per pool object (_provider, _policy): a few per pool in use


def _bound_spec(op: Operation) -> ProviderSpec:
    """The provider spec an operation was started with, checked as a pool's (raises
    ``ProviderSettingsError`` naming the field)."""
    spec = parse_provider_choice({op.action: json.loads(op.provider)},
                                 "status.operation.provider").for_action(op.action)
    assert spec is not None  # parse_provider_choice keeps the action it was given
    return spec


class RecordDeleted(Exception):
    """The Remediation record a reconcile decided on was deleted before its status was written."""


@dataclass(frozen=True)
class Facts:
    """What the informer cache says about one node: no request made."""

    name: str
    node: JSON | None
    records: list[JSON]
    active: JSON | None
    state: RepairState | None
    pool: Pool | None

    @property
    def pre_start(self) -> bool:
        return self.state is None or self.state.phase in PRE_START


@dataclass(frozen=True)
class Snapshot:
    """One look at the world for one reconcile: the facts, the pods (None: not needed, not
    listed) and the observation the state machine decides on."""

    facts: Facts
    pods: list[JSON] | None
    obs: Observation
    policy: RepairPolicy
    record_name: str  # the record a repair that starts now is written to


@dataclass(frozen=True)
class Plan:
    snapshot: Snapshot
    decision: Decision


@dataclass(frozen=True)
class Settings:
    policy: RepairPolicy
    attempt_window_default: float = pool_fields.ATTEMPT_WINDOW_SECONDS.default
    sim_reset_seconds: float = api.SIM_RESET_SECONDS
    sim_replace_seconds: float = api.SIM_REPLACE_SECONDS
    namespace: str = api.DEFAULT_NAMESPACE  # where provider Jobs run
    image: str = ""  # the controller's image: the default image of provider Jobs
    image_pull_secrets: tuple[str, ...] = ()  # what provider Jobs pull their image with
    host_reboot_command: tuple[str, ...] = api.DEFAULT_HOST_REBOOT_ARGV  # what the host-reboot Job runs in the host
    allow_lists: AllowLists = NO_ENTRIES  # the operator's: the only commands, images and URLs a pool may name


class Reconciler:
    def __init__(self, kube: Kube, clock: Clock, fleet: Fleet, actuator: Actuator, recorder: EventRecorder,
                 metrics: Metrics, settings: Settings) -> None:
        self._kube = kube
        self._clock = clock
        self._fleet = fleet
        self._names = fleet.names
        self._act = actuator
        self._recorder = recorder
        self._metrics = metrics
        self._settings = settings
        self._pool_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._providers: dict[tuple[str, str], Provider | str] = {}  # str: why it could not be built
        # per pool object (a changed spec is a new object): its provider for each action, its policy
        self._provider_of: ObjectMemo[tuple[tuple[str, str] | None, Provider | str | None, Provider | None,
                                            ProviderBlock | None]] = ObjectMemo(_PER_POOL_OBJECT_MAX)
        self._policy_of: ObjectMemo[RepairPolicy] = ObjectMemo(_PER_POOL_OBJECT_MAX)
        self._allowed_of: ObjectMemo[list[str]] = ObjectMemo(_PER_POOL_OBJECT_MAX)
        self.pool_reconciler = PoolReconciler(kube, clock, fleet, recorder, metrics, self._provider)
        self._plock = threading.Lock()
        # record name -> the resourceVersion whose unreadability was reported (one event per version)
        self._unreadable: dict[str, str] = {}
        self._claims = ReplacementClaims(kube, self._names)  # new nodes no provider named (_replacement_ready)
        self._build_context = BuildContext(kube, clock, self._names, sim_reset_seconds=settings.sim_reset_seconds,
                                           sim_replace_seconds=settings.sim_replace_seconds,
                                           namespace=settings.namespace, image=settings.image,
                                           image_pull_secrets=settings.image_pull_secrets,
                                           host_reboot_command=settings.host_reboot_command,
                                           allow_lists=settings.allow_lists,
                                           nodes=NodeCache(fleet.node, fleet.node_written, fleet.node_deleted,
                                                           fleet.node_informer.items))

    # --- entry -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> float | None:
        """Returns seconds until this key wants to be looked at again (None: only on change)."""
        if not self._fleet.owns(key):
            return None  # another shard's pool or node (sharded: it moved there since it was queued)
        if key.startswith(POOL_KEY):
            return self.pool_reconciler.reconcile(key[len(POOL_KEY):])
        if not log.isEnabledFor(logging.DEBUG):
            return self.reconcile_node(key)
        # The sign that a node was looked at and decided (``--verbose``): the version read first,
        # which every decision of this reconcile read or read past, and the open repair's phase
        # after it. What did not happen to a node is known from a line at or past the version
        # that should have made it happen (docs/operations.md, "Debugging: what the controller
        # decided about a node").
        seen = str(((self._fleet.node(key) or {}).get("metadata") or {}).get("resourceVersion") or "none")
        try:
            after = self.reconcile_node(key)
        except Exception as e:  # the caller logs and retries it; the line says it was tried
            log.debug("node %s reconciled (read at resourceVersion %s): failed (%s): %s", key, seen,
                      type(e).__name__, self._open_phase(key))
            raise
        log.debug("node %s reconciled (read at resourceVersion %s): %s", key, seen, self._open_phase(key))
        return after

    def _open_phase(self, name: str) -> str:
        """The phase of the node's open record as the cache holds it (our writes are in it), or why none."""
        active = next((r for r in self._fleet.records_of(name) if rec.is_active(r)), None)
        if active is None:
            return "no open repair"
        return f"record {active['metadata'].get('name', '')} {(active.get('status') or {}).get('phase') or 'new'}"

    def _provider(self, pool: Pool | None, action: str) -> tuple[Provider | None, ProviderBlock | None]:
        """The pool's provider for ``action``, or why there is none (never a default guessed).
        A reconcile asks several times; a pool object's answer is kept with the provider it found
        (a changed spec is a new object), and holds while that provider is still the one kept for
        the spec's settings."""
        if pool is None:
            return None, None
        _, _, provider, block = self._provider_of.get(
            pool, lambda: self._find_provider(pool, action), action,
            still=lambda kept: kept[0] is None or self._providers.get(kept[0]) is kept[1])
        return provider, block

    def _policy(self, pool: Pool | None) -> RepairPolicy:
        """The pool's repair policy over the controller's defaults, kept per pool object."""
        if pool is None:
            return self._settings.policy
        return self._policy_of.get(pool, lambda: pool.policy(self._settings.policy))

    def _find_provider(self, pool: Pool, action: str) -> tuple[
            tuple[str, str] | None, Provider | str | None, Provider | None, ProviderBlock | None]:
        """(the key of the provider kept for the spec, what is kept under it, the provider, the block)."""
        if pool.provider_error:
            return None, None, None, ProviderBlock(
                action, HOLD_PROVIDER_INVALID, f"the provider settings of pool {pool.name} are invalid: "
                f"{pool.provider_error}")
        refused = self._allow_list_refusals(pool)
        if refused:
            return None, None, None, ProviderBlock(
                action, HOLD_NOT_ALLOW_LISTED, f"pool {pool.name} names what the operator did not allow: "
                f"{refused[0]}; its repairs are held")
        spec = pool.provider_for(action)
        if spec is None:
            return None, None, None, ProviderBlock(
                action, HOLD_NO_PROVIDER, f"no repair provider configured for {action} in pool {pool.name} "
                f"(spec.provider)")
        cache_key = (pool.name, spec.key())
        cached = self._built(cache_key, lambda: spec)
        if isinstance(cached, str):
            return cache_key, cached, None, ProviderBlock(
                action, HOLD_PROVIDER_INVALID, f"the provider settings of pool {pool.name} are invalid: {cached}")
        return cache_key, cached, cached, None

    def _allow_list_refusals(self, pool: Pool) -> list[str]:
        """What the pool names that is no entry of the operator's allow-lists (kept per pool object)."""
        return self._allowed_of.get(pool, lambda: pool.config.allow_list_refusals(self._settings.allow_lists))

    def _built(self, cache_key: tuple[str, str], spec: Callable[[], ProviderSpec]) -> Provider | str:
        """The provider kept for (pool, spec), built on first use; a string: why it cannot be."""
        with self._plock:
            cached = self._providers.get(cache_key)
            if cached is None:
                try:
                    cached = build_provider(spec(), self._build_context)
                except (ProviderError, ProviderSettingsError) as e:
                    cached = str(e)
                self._providers[cache_key] = cached
        return cached

    def _operation_provider(self, pool: Pool | None, state: RepairState) -> tuple[Provider | None,
                                                                                ProviderBlock | None]:
        """The provider of the repair's operation: the one it was started with (``Operation.provider``,
        in the record), whatever the pool's settings are now, so that one operation never starts
        a second provider (a changed spec builds a new one, which knows nothing of the operation
        and would start it again). It is kept beside the pool's providers under the same key, so
        the operation's first look finds the very provider that started it. A record from before
        the binding: the pool's provider of the moment."""
        op = state.operation
        assert op is not None
        if not op.provider:
            return self._provider(pool, op.action)
        cached = self._built((state.pool, op.provider), lambda: _bound_spec(op))
        if isinstance(cached, str):
            return None, ProviderBlock(op.action, HOLD_PROVIDER_INVALID,
                                       f"the provider operation {op.id} was started with cannot be used: {cached}")
        return cached, None

    @staticmethod
    def _provider_specs(pool: Pool | None) -> tuple[tuple[str, str], ...]:
        """The pool's provider spec for each action it has one for: what an operation started now
        is bound to."""
        if pool is None or pool.provider_error:
            return ()
        return tuple((a, spec.key()) for a in ACTIONS.names() if (spec := pool.provider_for(a)) is not None)

    def _provider_blocks(self, pool: Pool, node: JSON | None) -> tuple[ProviderBlock, ...]:
        blocks = []
        for action in ACTIONS.names():
            provider, block = self._provider(pool, action)
            if provider is not None and (why := provider.refusal(node)):
                block = ProviderBlock(action, HOLD_PROVIDER_REFUSED, why)
            if block is not None:
                blocks.append(block)
        return tuple(blocks)

    # --- node ------------------------------------------------------------------------------
    def reconcile_node(self, name: str) -> float | None:
        self._act.report_hooks(name, self._fleet.node(name))  # hooks that ended requeued the node
        try:
            facts = self._facts(name)
        except rec.UnreadableRecord as e:
            self._hold_unreadable(name, e)
            return None  # looked at again when the record (or the node) changes
        if facts is None:
            return None
        if facts.node is not None and self._stray_approval(facts):
            self._remove_stray_approval(name, facts.node)
            facts = self._facts(name)  # the node as written
            if facts is None:
                return None
        if facts.active is None and facts.node is not None and self._fleet.fault_of(facts.node)[0] is None:
            # the common case (a healthy node): only leftovers of an earlier repair to clean
            self._cleanup_leftovers(name, facts.node, facts.records, None)
            return None
        # the one API read of a reconcile, made before the pool's lock, never under it
        pods = self._kube.pods_on_node(name) if self._wants_pods(facts) else None
        if facts.pool is None or not facts.pre_start:
            return self._commit(self._decide(self._snapshot(facts, pods)))
        pool = facts.pool
        with self._pool_locks[pool.name]:
            # Look again under the lock: while we waited, the node (its fault) or the pool's
            # other repairs may have changed, and the guards must judge the present.
            again = self._facts(name, pool)
            if again is None:
                return None
            plan = self._decide(self._snapshot(again, pods))
            state, new = again.state, plan.decision.state
            # A repair that starts takes its slot now, before the lock is released; the
            # record's write makes it visible to the next reconcile (the persist and the
            # actions run outside the lock so the pool's other nodes are not serialised).
            reserved = new is not None and new.phase in IN_PROGRESS and (state is None or not state.started)
            if reserved and new is not None:
                self._fleet.reserve(pool.name, new.name)
        try:
            return self._commit(plan)
        finally:
            if reserved and new is not None:
                self._fleet.unreserve(pool.name, new.name)

    def _hold_unreadable(self, name: str, error: rec.UnreadableRecord) -> None:
        """The node's open record cannot be read: nothing is decided for the node (a new repair
        beside an unread one could double it), the record is left as it is, and the node gets one
        Warning event per version of the record (the metric counts such records at each scrape)."""
        active = next((r for r in self._fleet.records_of(name) if rec.is_active(r)), None)
        meta = (active or {}).get("metadata") or {}
        record, version = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
        if self._unreadable.get(record) == version:
            return
        if len(self._unreadable) >= _UNREADABLE_MAX:
            self._unreadable.clear()  # records fixed or deleted since: start over rather than grow
        self._unreadable[record] = version
        log.warning("node %s: %s; its repairs are held", name, error)
        self._recorder.emit(ObjectRef("Node", name), EVENT_RECORD_UNREADABLE,
                            words.record_unreadable(record, str(error)), warning=True)
    def _stray_approval(self, f: Facts) -> bool:
        """The node carries an approval that no maintenance-required backs (docs/contract.md,
        "Admission rules"): it approves nothing, and left in place it would approve the node's
        next fault before anyone saw it. A pool in consent mode ``off`` gets no writes."""
        labels = ((f.node or {}).get("metadata") or {}).get("labels") or {}
        return (self._names.maintenance_approved in labels and self._names.maintenance_required not in labels
                and (f.pool is None or f.pool.mode != api.ConsentMode.OFF))

    def _remove_stray_approval(self, name: str, node: JSON) -> None:
        """Before anything is decided, so a repair decided now never counts it (the actuator
        records the Warning event). A removal that fails (another admission webhook refusing it,
        the API server away) never holds the node's repair: the reconcile goes on, the snapshot
        does not count the approval (``approved`` needs both labels), and the marking of a
        repair removes it in the same write that adds maintenance-required."""
        try:
            written = self._act.remove_stray_approval(node)
        except KubeError as e:
            log.warning("node %s: could not remove %s, which no %s backs (it is not counted): %s", name,
                        self._names.maintenance_approved, self._names.maintenance_required, e)
            return
        if written is not node:
            self._fleet.node_written(written)

    def _facts(self, name: str, pool: Pool | None = None) -> Facts | None:
        """The node, its records, the active one and its state, the pool: from the cache. None
        when neither the node nor an active record exists. Raises ``UnreadableRecord`` when the
        active record cannot be read."""
        node = self._fleet.node(name)
        records = self._fleet.records_of(name)
        active = next((r for r in records if rec.is_active(r)), None)
        if node is None and active is None:
            return None
        state = rec.state_of(active) if active else None
        if pool is None:
            pool = self._fleet.pool_for(node) if node is not None else None
            if pool is None and state is not None:
                pool = self._fleet.pool_named(state.pool)
        return Facts(name, node, records, active, state, pool)

    def _wants_pods(self, f: Facts) -> bool:
        """The decision reads the pods: a repair about to be decided, held before its start, or
        draining."""
        if f.node is None:
            return False
        if f.state is None:
            ref = self._fleet.fault_of(f.node)[0]
            return f.pool is not None and f.pool.mode != api.ConsentMode.OFF and ref is not None \
                and f.pool.action_for(ref) is not None
        return f.state.phase in (Phase.SCHEDULED, Phase.DRAINING, Phase.AWAITING_APPROVAL)

    def _decide(self, snap: Snapshot) -> Plan:
        """The pure part: the state machine on the snapshot; no reads, no writes."""
        decision = transition(snap.facts.state, snap.obs, self._clock.now(), snap.policy,
                              record_name=snap.record_name)
        return Plan(snap, decision)

    def _commit(self, plan: Plan) -> float | None:
        """Persist the decided state, then carry out its plan."""
        f, decision, obs = plan.snapshot.facts, plan.decision, plan.snapshot.obs
        name, state, pool = f.name, f.state, f.pool
        if decision.state is None:
            self._cleanup_leftovers(name, f.node, f.records, obs)
            return None
        if decision.state != state:
            try:
                stored = self._persist(f.active, decision.state)
            except RecordDeleted:
                # Not a lost race: the record was deleted (kubectl delete, a cleanup script) while
                # this reconcile decided on it. Nothing of the decision is carried out; the next
                # look starts from the cluster as it is (a fault still there is a new repair,
                # decided under the pool's rules; the node's marks are kept or removed by it).
                log.warning("node %s: Remediation %s was deleted while its repair was %s; nothing done, "
                            "looking again", name, decision.state.name, state.phase.value if state else "new")
                return 0
            if stored is None:
                return 0.2  # another writer got there first: look again at the fresh record
            self._observe_metrics(state, decision)
            if state is None or state.phase != decision.state.phase:
                log.info("node %s record %s: %s -> %s (pool in progress %s): %s", name, decision.state.name,
                         state.phase.value if state else "-", decision.state.phase.value,
                         obs.pool.in_progress if obs.pool else "-", decision.state.message)
        # only a DriveProvider uses it, and it drives the state's operation
        provider = self._operation_provider(pool, decision.state)[0] if decision.state.operation else None
        self._act.run(decision.actions, name, f.node, decision.state, provider,
                      hook=pool.config.pre_drain.hook if pool else None, pods=plan.snapshot.pods,
                      node_written=self._fleet.node_written)  # also when a later write of the plan fails
        if decision.state.phase in TERMINAL and (state is None or state.phase not in TERMINAL) and pool:
            self._fleet.wake_held(pool.name)
        return decision.requeue_after

    def _pods_view(self, all_pods: list[JSON]) -> PodsView:
        drainable = drainrules.drainable(all_pods)
        return PodsView(evictable=len(drainable),
                        opt_out=drainrules.opted_out(all_pods, self._names.auto_replacement_label),
                        warned_for=tuple(drainrules.warned_for(p, self._names.remediation) for p in drainable
                                         if not p["metadata"].get("deletionTimestamp")),
                        wait_acks=drainrules.wait_acks(drainable, self._names.drain_wait_label,
                                                       self._names.pod_drain_ack))

    def _snapshot(self, f: Facts, pods: list[JSON] | None) -> Snapshot:
        """The observation the state machine decides on, from the facts and the pods."""
        name, node, records, active, state, pool = f.name, f.node, f.records, f.active, f.state, f.pool
        policy = self._policy(pool)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        prefix = self._names.drain_ack_prefix
        view = NodeView(
            name=name, exists=node is not None, ready=node_ready(node),
            boot_id=str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID", "")),
            unschedulable=bool(((node or {}).get("spec") or {}).get("unschedulable")),
            # an approval counts only while maintenance-required backs it (the admission rule)
            approved=labels.get(self._names.maintenance_approved) == "true"
            and self._names.maintenance_required in labels,
            warned_for=str(annotations.get(self._names.remediation, "")),
            drain_acks={k[len(prefix):]: str(v) for k, v in annotations.items() if k.startswith(prefix)})
        ref, cond = self._fleet.fault_of(node)
        chosen = pool.chosen_action(ref) if (ref is not None and pool is not None) else None
        action, action_note = pool.carried_out(chosen) if (chosen is not None and pool is not None) else (None, "")
        fault = None
        if ref is not None and (action is not None or state is not None):
            fault = Fault(ref.fault_class.value, ref.code, ref.reason, ref.message)
        pool_view = None
        if pool is not None:
            open_ = breaker_reading(pool, self._fleet).state == brk.OPEN
            pool_view = PoolView(pool.name, pool.mode, pool.config.max_concurrent_repairs,
                                 self._fleet.in_progress(pool.name, exclude=active["metadata"]["name"] if active
                                                         else ""), open_)
        if pods is None and self._wants_pods(f):
            pods = self._kube.pods_on_node(name)  # wanted only on the second look (the facts changed)
        pods_view = self._pods_view(pods) if pods is not None and self._wants_pods(f) else PodsView()
        provider_view = ProviderView()
        replacement_ready, replacement = False, ""
        op_block: ProviderBlock | None = None
        if state is not None and state.operation is not None and state.phase == Phase.ACTING:
            provider, op_block = self._operation_provider(pool, state)
            if provider is not None:
                provider_view = provider.progress(state.operation, name, state.pool, self._fleet.node)
            elif op_block is not None:  # the operation's provider cannot be asked (gone from the pool, broken)
                provider_view = ProviderView(ProviderState.FAILED, op_block.message)
        if state is not None and state.phase == Phase.VERIFYING \
                and ACTIONS[state.action].proof == Proof.REPLACED:
            replacement_ready, replacement = self._replacement_ready(state)
        blocks: tuple[ProviderBlock, ...] = ()
        if pool is not None and (fault is not None or (state is not None and state.phase not in TERMINAL)):
            blocks = self._provider_blocks(pool, node)  # also in Acting/Verifying: a failed reset escalates
        if state is not None and state.operation is not None and state.operation.provider \
                and state.phase == Phase.ACTING:
            # the operation's own provider answers for its action, not the pool's of the moment
            blocks = tuple(b for b in blocks if b.action != state.operation.action) + \
                ((op_block,) if op_block is not None else ())
        obs = Observation(node=view, fault=fault, fault_action=action, pool=pool_view, pods=pods_view,
                          history=self._history(records, active, pool), provider=provider_view,
                          replacement_ready=replacement_ready, replacement_node=replacement,
                          provider_blocks=blocks, provider_specs=self._provider_specs(pool),
                          fault_action_note=action_note,
                          has_hook=pool is not None and pool.config.pre_drain.hook is not None,
                          hook_running=active is not None and self._act.hooks.running(active["metadata"]["name"]))
        if state is None and active is None and fault is not None:
            record_name = rec.record_name(name, str((cond or {}).get("type", "")),
                                          str((cond or {}).get("lastTransitionTime", "")), len(records))
        else:
            record_name = active["metadata"]["name"] if active else ""
        return Snapshot(f, pods, obs, policy, record_name)

    def _replacement_ready(self, state: RepairState) -> tuple[bool, str]:
        """Whether the new node is Ready, and its name.

        When the provider did not name it (a command provider's script that printed no
        ``new-node=``), the repair claims one new Ready member of the pool, created since the
        operation started, with the guarded patch the Karpenter and Cluster API providers use
        (``providers.replacement``): two repairs of one pool never count the same new node, and
        a restarted controller finds its claim on the node.
        """
        if state.replacement_node:
            return node_ready(self._fleet.node(state.replacement_node)), state.replacement_node
        op = state.operation
        if op is None:
            return False, ""
        nodes = [obj for m in sorted(self._fleet.members(state.pool)) if (obj := self._fleet.node(m)) is not None]
        mine = self._claims.claimed_by(op, nodes)
        if mine is None:
            mine = self._claims.claim(op, state.node, state.pool, self._claims.candidates(op, state.node, nodes),
                                      in_pool=lambda _n: True)  # members of the pool by its membership rule
            if mine is None:
                return False, ""
            self._fleet.node_written(mine)
        return node_ready(mine), str(mine["metadata"]["name"])

    def _history(self, records: list[JSON], active: JSON | None, pool: Pool | None) -> HistoryView:
        now = self._clock.now()
        window = pool.config.attempt_window_seconds if pool else self._settings.attempt_window_default
        started = 0
        last: RepairState | None = None
        for r in records:
            if active is not None and r["metadata"]["name"] == active["metadata"]["name"]:
                continue
            try:
                s = rec.state_of(r)
            except rec.UnreadableRecord:
                continue  # an old record nobody can read counts for nothing
            if s is None:
                continue
            if s.attempts > 0 and s.created and s.created >= now - timedelta(seconds=window):
                started += 1
            if s.outcome == Outcome.SUCCEEDED and ACTIONS[s.action].keeps_node and s.completed \
                    and (last is None or (last.completed and s.completed > last.completed)):
                last = s
        if last is None:
            return HistoryView(started_in_window=started)
        return HistoryView(started_in_window=started, last_reset_at=last.completed, last_reset_fault=last.fault,
                           last_reset_approved=last.approved, last_reset_record=last.name)

    def _persist(self, active: JSON | None, state: RepairState) -> JSON | None:
        """Creates the record or patches its status, guarded by its resourceVersion. None: another
        writer got there first (a 409), so nothing may act on this decision. Raises RecordDeleted
        when the record is gone (a 404 on its status: deleted by a person or a tool, not a race)."""
        g = self._names.api_group
        try:
            if active is None:
                active = self._kube.create(Kube.custom_path(g, api.VERSION, api.REMEDIATIONS.plural),
                                           rec.new_record(state, self._names))
                self._fleet.record_written(active)
            status = rec.status_of(state)
            if (active.get("status") or {}) == status:
                return active
            body = {"metadata": {"resourceVersion": active["metadata"]["resourceVersion"]},
                    "status": rec.status_patch(active.get("status") or {}, status)}
            stored = self._kube.patch(
                Kube.custom_path(g, api.VERSION, api.REMEDIATIONS.plural, state.name) + "/status", body)
        except Conflict:
            return None
        except NotFound as e:
            if active is None:
                raise  # the create itself: the Remediation CRD is not served (a setup error, not a record)
            self._fleet.record_deleted(state.name)
            raise RecordDeleted(state.name) from e
        self._fleet.record_written(stored)
        return stored

    def _observe_metrics(self, before: RepairState | None, d: Decision) -> None:
        after = d.state
        assert after is not None
        if before is None:
            self._metrics.faults.labels(after.fault.fault_class).inc()
        prev_phase = before.phase.value if before else None
        if after.phase.value != prev_phase:
            self._metrics.repairs.labels(after.phase.value).inc()
            if before is not None and before.steps:
                spent = (after.steps[-1].time - before.steps[-1].time).total_seconds() if after.steps else 0
                self._metrics.phase_seconds.labels(before.phase.value).observe(max(spent, 0.0))
            if after.outcome and not (before and before.outcome):
                self._metrics.outcomes.labels(str(after.action), after.outcome).inc()

    def _cleanup_leftovers(self, name: str, node: JSON | None, records: list[JSON], obs: Observation | None
                           ) -> None:
        """No active record: our label or taint on the node are leftovers (e.g. a crash after the
        record was closed and before the node was cleaned). Remove them, quietly."""
        if node is None:
            return
        labels = node["metadata"].get("labels") or {}
        annotations = node["metadata"].get("annotations") or {}
        taints = (node.get("spec") or {}).get("taints") or []
        marked = labels.get(self._names.maintenance_required) is not None or any(
            t.get("key") == self._names.taint_key for t in taints)
        warned = any(k in self._names.warning_annotations or k.startswith(self._names.drain_ack_prefix)
                     for k in annotations)
        if not (marked or warned):
            return
        if obs is not None and obs.fault is not None and obs.pool is not None and obs.pool.mode != api.ConsentMode.OFF:
            return  # a new repair is being decided
        if not marked:
            # only the warning's annotations or a late acknowledgement: removed, the cordon untouched
            self._act.run((ClearWarning(),), name, node, None, None)
            return
        try:
            last = rec.state_of(records[-1]) if records else None
        except rec.UnreadableRecord:
            last = None  # then the cordon is left as it is
        uncordon = bool(last and last.started and not last.node_was_cordoned)
        self._act.run((Unmark(uncordon=uncordon),), name, node, None, None)
