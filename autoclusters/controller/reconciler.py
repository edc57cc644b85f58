"""One reconcile of one node, in a fixed order (see docs/workflow.md):

1. fetch: the node, its pool and its active Remediation record from the informers;
2. snapshot: build the ``Observation`` (fault, node health, pods, pool guards, history,
   provider progress);
3. decide: ``statemachine.transition`` — the only place a phase changes;
4. persist: create the record, or patch its status with its resourceVersion as a
   precondition (an empty diff is skipped; a Conflict means another writer won: requeue);
5. act: carry out the actions (only after the state that asked for them is stored);
6. requeue-after what the state machine asked for.

Pools are reconciled under the key ``pool:<name>``: their status and circuit breaker.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from autoclusters import api
from autoclusters.clock import Clock, parse_iso, utc_iso
from autoclusters.controller import breaker as brk
from autoclusters.controller import drain as drainrules
from autoclusters.controller import remediation_record as rec
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.cache import POOL_KEY, PRE_START, Fleet
from autoclusters.controller.metrics import Metrics
from autoclusters.controller.pool_policy import Pool
from autoclusters.controller.statemachine import (
    HOLD_NO_PROVIDER,
    HOLD_PROVIDER_INVALID,
    HOLD_PROVIDER_REFUSED,
    IN_PROGRESS,
    TERMINAL,
    ClearWarning,
    Decision,
    Fault,
    HistoryView,
    NodeView,
    Observation,
    Outcome,
    Phase,
    PodsView,
    PoolView,
    ProviderBlock,
    ProviderState,
    ProviderView,
    RepairAction,
    RepairPolicy,
    RepairState,
    Unmark,
    transition,
)
from autoclusters.deploy import API_VERSION
from autoclusters.kube import Conflict, Kube, NotFound
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.kube.objects import node_ready
from autoclusters.names import EVENT_BREAKER_CLOSED, EVENT_BREAKER_OPEN
from autoclusters.providers import Provider, ProviderError, build_provider
from autoclusters.providers.registry import BuildContext

log = logging.getLogger(__name__)

JSON = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    node: JSON | None
    records: list[JSON]
    active: JSON | None
    state: RepairState | None
    obs: Observation
    decision: Decision


@dataclass(frozen=True)
class Settings:
    policy: RepairPolicy
    attempt_window_default: float = api.ATTEMPT_WINDOW_SECONDS.default
    sim_reset_seconds: float = api.SIM_RESET_SECONDS
    sim_replace_seconds: float = api.SIM_REPLACE_SECONDS
    namespace: str = "autoclusters-system"  # where provider Jobs run
    image: str = ""  # the controller's image: the default image of provider Jobs


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
        self._plock = threading.Lock()
        self._build_context = BuildContext(kube, clock, self._names, sim_reset_seconds=settings.sim_reset_seconds,
                                           sim_replace_seconds=settings.sim_replace_seconds,
                                           namespace=settings.namespace, image=settings.image)

    # --- entry -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> float | None:
        """Returns seconds until this key wants to be looked at again (None: only on change)."""
        if key.startswith(POOL_KEY):
            return self.reconcile_pool(key[len(POOL_KEY):])
        return self.reconcile_node(key)

    def _provider(self, pool: Pool | None, action: RepairAction) -> tuple[Provider | None, ProviderBlock | None]:
        """The pool's provider for ``action``, or why there is none (never a default guessed)."""
        if pool is None:
            return None, None
        if pool.provider_error:
            return None, ProviderBlock(action, HOLD_PROVIDER_INVALID,
                                       f"the provider settings of pool {pool.name} are invalid: {pool.provider_error}")
        spec = pool.provider_for(action)
        if spec is None:
            return None, ProviderBlock(action, HOLD_NO_PROVIDER,
                                       f"no repair provider configured for {action} in pool {pool.name} "
                                       f"(spec.provider)")
        cache_key = (pool.name, spec.key())
        with self._plock:
            cached = self._providers.get(cache_key)
            if cached is None:
                try:
                    cached = build_provider(spec, self._build_context)
                except ProviderError as e:
                    cached = str(e)
                self._providers[cache_key] = cached
        if isinstance(cached, str):
            return None, ProviderBlock(action, HOLD_PROVIDER_INVALID,
                                       f"the provider settings of pool {pool.name} are invalid: {cached}")
        return cached, None

    def _provider_blocks(self, pool: Pool, node: JSON | None) -> tuple[ProviderBlock, ...]:
        blocks = []
        for action in RepairAction:
            provider, block = self._provider(pool, action)
            if provider is not None and (why := provider.refusal(node)):
                block = ProviderBlock(action, HOLD_PROVIDER_REFUSED, why)
            if block is not None:
                blocks.append(block)
        return tuple(blocks)

    # --- node ------------------------------------------------------------------------------
    def reconcile_node(self, name: str) -> float | None:
        node = self._fleet.node(name)
        records = self._fleet.records_of(name)
        active = next((r for r in records if rec.is_active(r)), None)
        state = rec.state_of(active) if active else None
        pool = self._fleet.pool_for(node) if node is not None else None
        if pool is None and state is not None:
            pool = self._fleet.pool_named(state.pool)
        if node is None and active is None:
            return None
        if active is None and node is not None and self._fleet.fault_of(node)[0] is None:
            # the common case (a healthy node): only leftovers of an earlier repair to clean
            self._cleanup_leftovers(name, node, records, None)
            return None
        pre_start = state is None or state.phase in PRE_START
        if pool is None or not pre_start:
            return self._commit(name, pool, self._plan(name, node, records, active, state, pool))
        pods = self._pods(name)  # an API call: made before the pool's lock, never under it
        with self._pool_locks[pool.name]:
            # Read again under the lock: while we waited, the node (its fault) or the pool's
            # other repairs may have changed, and the guards must judge the present.
            node = self._fleet.node(name)
            records = self._fleet.records_of(name)
            active = next((r for r in records if rec.is_active(r)), None)
            state = rec.state_of(active) if active else None
            if node is None and active is None:
                return None
            plan = self._plan(name, node, records, active, state, pool, pods)
            new = plan.decision.state
            # A repair that starts takes its slot now, before the lock is released; the
            # record's write makes it visible to the next reconcile (the persist and the
            # actions run outside the lock so the pool's other nodes are not serialised).
            reserved = new is not None and new.phase in IN_PROGRESS and (state is None or not state.started)
            if reserved and new is not None:
                self._fleet.reserve(pool.name, new.name)
        try:
            return self._commit(name, pool, plan)
        finally:
            if reserved and new is not None:
                self._fleet.unreserve(pool.name, new.name)

    def _plan(self, name: str, node: JSON | None, records: list[JSON], active: JSON | None,
              state: RepairState | None, pool: Pool | None, pods: PodsView | None = None) -> Plan:
        """Observe and decide; no writes."""
        now = self._clock.now()
        policy = pool.policy(self._settings.policy) if pool else self._settings.policy
        obs, cond = self._observe(name, node, records, active, state, pool, policy, pods)
        if state is None and active is None and obs.fault is not None:
            seq = len(records)
            new_name = rec.record_name(name, str((cond or {}).get("type", "")),
                                       str((cond or {}).get("lastTransitionTime", "")), seq)
        else:
            new_name = active["metadata"]["name"] if active else ""
        decision = transition(state, obs, now, policy, record_name=new_name)
        return Plan(node, records, active, state, obs, decision)

    def _commit(self, name: str, pool: Pool | None, plan: Plan) -> float | None:
        """Persist the decided state, then carry out its actions."""
        state, decision, obs = plan.state, plan.decision, plan.obs
        if decision.state is None:
            self._cleanup_leftovers(name, plan.node, plan.records, obs)
            return None
        if decision.state != state:
            stored = self._persist(plan.active, decision.state)
            if stored is None:
                return 0.2  # another writer got there first: look again at the fresh record
            self._observe_metrics(state, decision)
            if state is None or state.phase != decision.state.phase:
                log.info("node %s record %s: %s -> %s (pool in progress %s): %s", name, decision.state.name,
                         state.phase.value if state else "-", decision.state.phase.value,
                         obs.pool.in_progress if obs.pool else "-", decision.state.message)
        provider, _ = self._provider(pool, decision.state.action)
        self._act.run(decision.actions, name, plan.node, decision.state, provider,
                      hook=pool.config.pre_drain.hook if pool else None)
        if decision.state.phase in TERMINAL and (state is None or state.phase not in TERMINAL) and pool:
            self._fleet.wake_held(pool.name)
        return decision.requeue_after

    def _pods(self, name: str) -> PodsView:
        all_pods = self._kube.pods_on_node(name)
        drainable = drainrules.drainable(all_pods)
        return PodsView(evictable=len(drainable),
                        opt_out=drainrules.opted_out(all_pods, self._names.auto_replacement_label),
                        warned_for=tuple(drainrules.warned_for(p, self._names.remediation) for p in drainable
                                         if not p["metadata"].get("deletionTimestamp")),
                        wait_acks=drainrules.wait_acks(drainable, self._names.drain_wait_label,
                                                       self._names.pod_drain_ack))

    def _observe(self, name: str, node: JSON | None, records: list[JSON], active: JSON | None,
                 state: RepairState | None, pool: Pool | None, policy: RepairPolicy,
                 pods_seen: PodsView | None = None) -> tuple[Observation, JSON | None]:
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        prefix = self._names.drain_ack_prefix
        view = NodeView(
            name=name, exists=node is not None, ready=node_ready(node),
            boot_id=str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID", "")),
            unschedulable=bool(((node or {}).get("spec") or {}).get("unschedulable")),
            approved=labels.get(self._names.maintenance_approved) == "true",
            warned_for=str(annotations.get(self._names.remediation, "")),
            drain_acks={k[len(prefix):]: str(v) for k, v in annotations.items() if k.startswith(prefix)})
        ref, cond = self._fleet.fault_of(node)
        action = pool.action_for(ref) if (ref is not None and pool is not None) else None
        fault = None
        if ref is not None and (action is not None or state is not None):
            fault = Fault(ref.fault_class.value, ref.code, ref.reason, ref.message)
        pool_view = None
        if pool is not None:
            open_ = self._breaker_open(pool)
            pool_view = PoolView(pool.name, pool.mode, pool.config.max_concurrent_repairs,
                                 self._fleet.in_progress(pool.name, exclude=active["metadata"]["name"] if active
                                                         else ""), open_)
        pods = PodsView()
        wants_pods = node is not None and (
            (state is None and fault is not None and pool is not None and pool.mode.value != "off")
            or (state is not None and state.phase in (Phase.SCHEDULED, Phase.DRAINING, Phase.AWAITING_APPROVAL)))
        if wants_pods:
            pods = pods_seen if pods_seen is not None else self._pods(name)
        provider_view = ProviderView()
        replacement_ready = False
        if state is not None and state.operation is not None and state.phase == Phase.ACTING:
            provider, block = self._provider(pool, state.operation.action)
            if provider is not None:
                provider_view = provider.progress(state.operation, name, state.pool, self._fleet.node)
            elif block is not None:  # the pool's provider was removed or broken mid-operation
                provider_view = ProviderView(ProviderState.FAILED, block.message)
        if state is not None and state.phase == Phase.VERIFYING and state.action == RepairAction.REPLACE:
            replacement_ready = self._replacement_ready(state)
        blocks: tuple[ProviderBlock, ...] = ()
        if pool is not None and (fault is not None or (state is not None and state.phase not in TERMINAL)):
            blocks = self._provider_blocks(pool, node)  # also in Acting/Verifying: a failed reset escalates
        obs = Observation(node=view, fault=fault, fault_action=action, pool=pool_view, pods=pods,
                          history=self._history(records, active, pool), provider=provider_view,
                          replacement_ready=replacement_ready, provider_blocks=blocks)
        return obs, cond

    def _replacement_ready(self, state: RepairState) -> bool:
        if state.replacement_node:
            return node_ready(self._fleet.node(state.replacement_node))
        started = state.operation.started if state.operation else None
        for member in self._fleet.members(state.pool):  # the provider did not name it: any new Ready node
            obj = self._fleet.node(member)
            created = parse_iso((obj or {}).get("metadata", {}).get("creationTimestamp"))
            if member != state.node and created and started and created >= started and node_ready(obj):
                return True
        return False

    def _history(self, records: list[JSON], active: JSON | None, pool: Pool | None) -> HistoryView:
        now = self._clock.now()
        window = pool.config.attempt_window_seconds if pool else self._settings.attempt_window_default
        started = 0
        last: RepairState | None = None
        for r in records:
            if active is not None and r["metadata"]["name"] == active["metadata"]["name"]:
                continue
            s = rec.state_of(r)
            if s is None:
                continue
            if s.attempts > 0 and s.created and s.created >= now - timedelta(seconds=window):
                started += 1
            if s.outcome == Outcome.SUCCEEDED and s.action == RepairAction.RESET and s.completed \
                    and (last is None or (last.completed and s.completed > last.completed)):
                last = s
        if last is None:
            return HistoryView(started_in_window=started)
        return HistoryView(started_in_window=started, last_reset_at=last.completed, last_reset_fault=last.fault,
                           last_reset_approved=last.approved, last_reset_record=last.name)

    def _persist(self, active: JSON | None, state: RepairState) -> JSON | None:
        g = self._names.api_group
        try:
            if active is None:
                try:
                    active = self._kube.create(Kube.custom_path(g, API_VERSION, api.REMEDIATIONS.plural),
                                               rec.new_record(state, self._names))
                except Conflict:
                    return None
                self._fleet.record_written(active)
            status = rec.status_of(state)
            if (active.get("status") or {}) == status:
                return active
            body = {"metadata": {"resourceVersion": active["metadata"]["resourceVersion"]}, "status": status}
            stored = self._kube.patch(
                Kube.custom_path(g, API_VERSION, api.REMEDIATIONS.plural, state.name) + "/status", body)
        except (Conflict, NotFound):
            return None
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
                self._metrics.outcomes.labels(after.action.value, after.outcome).inc()

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
        if obs is not None and obs.fault is not None and obs.pool is not None and obs.pool.mode.value != "off":
            return  # a new repair is being decided
        if not marked:
            # only the warning's annotations or a late acknowledgement: removed, the cordon untouched
            self._act.run((ClearWarning(),), name, node, None, None)
            return
        last = rec.state_of(records[-1]) if records else None
        uncordon = bool(last and last.started and not last.node_was_cordoned)
        self._act.run((Unmark(uncordon=uncordon),), name, node, None, None)

    # --- pool ------------------------------------------------------------------------------
    def _provider_condition(self, pool: Pool) -> tuple[str, bool, str, str]:
        """RepairProviderReady: every action has a provider that accepts every node of the pool."""
        problems: list[ProviderBlock] = []
        providers: list[Provider] = []
        for action in RepairAction:
            provider, block = self._provider(pool, action)
            if block is not None:
                problems.append(block)
                continue
            assert provider is not None
            providers.append(provider)
        refused: dict[str, list[str]] = defaultdict(list)
        if not problems:
            # One pass over the members (the pool reconciles on every change of its faulty count),
            # each distinct provider asked once per node; only the refused names are sorted.
            distinct = list({id(prov): prov for prov in providers}.values())
            by_provider: dict[int, list[str]] = {id(prov): [] for prov in distinct}
            for member in self._fleet.members(pool.name):
                member_node = self._fleet.node(member)
                for prov in distinct:
                    if prov.refusal(member_node):
                        by_provider[id(prov)].append(member)
            for prov in providers:
                if by_provider[id(prov)]:
                    refused[prov.name].extend(sorted(by_provider[id(prov)]))
        if problems:
            first = problems[0]
            if all(b.hold == HOLD_NO_PROVIDER for b in problems):
                missing = ", ".join(b.action.value for b in problems)
                return ("RepairProviderReady", False, HOLD_NO_PROVIDER,
                        f"no repair provider configured for {missing}: faults are reported and nodes marked, "
                        "repairs are held until spec.provider names one")
            return "RepairProviderReady", False, first.hold, first.message
        if refused:
            kind, nodes = next(iter(sorted(refused.items())))
            node = self._fleet.node(nodes[0])
            why = next((p.refusal(node) for a in RepairAction if (p := self._provider(pool, a)[0]) is not None
                        and p.refusal(node)), "")
            return ("RepairProviderReady", False, HOLD_PROVIDER_REFUSED,
                    f"the {kind} provider refuses {len(nodes)} node(s) of the pool ({', '.join(nodes[:5])}): {why}")
        return ("RepairProviderReady", True, "ProvidersReady",
                f"providers: {pool.config.provider.describe()}")

    def _write_pool_status(self, obj: Mapping[str, Any], status: JSON,
                           conditions: list[tuple[str, bool, str, str]]) -> JSON | None:
        """Patches the pool's status (conditions keep their transition time while unchanged) and
        records an event on the pool when a condition turns False; None when nothing changed."""
        name = obj["metadata"]["name"]
        old = obj.get("status") or {}
        before = {c.get("type"): c for c in old.get("conditions") or []}
        now = utc_iso(self._clock.now())
        generation = obj.get("metadata", {}).get("generation", 0)
        written, turned_false = [], []
        for ctype, ok, reason, message in conditions:
            value = "True" if ok else "False"
            prev = before.get(ctype) or {}
            same = prev.get("status") == value
            written.append({"type": ctype, "status": value, "reason": reason, "message": message,
                            "lastTransitionTime": prev.get("lastTransitionTime", now) if same else now,
                            "observedGeneration": generation})
            if not ok and (not same or prev.get("reason") != reason):
                turned_false.append((reason, message))
        status = {**status, "conditions": written}
        if status == old:
            return None
        try:
            stored = self._kube.patch(Kube.custom_path(self._names.api_group, API_VERSION, api.POOLS.plural, name)
                                      + "/status", {"status": status})
        except NotFound:
            return None
        self._fleet.pool_written(stored)
        ref = ObjectRef(api.POOLS.kind, name, api_version=f"{self._names.api_group}/{API_VERSION}",
                        uid=obj.get("metadata", {}).get("uid", ""))
        for reason, message in turned_false:
            self._recorder.emit(ref, reason, message, warning=True)
        return stored

    def _breaker_open(self, pool: Pool) -> bool:
        cb = pool.config.circuit_breaker
        members, faulty = self._fleet.counts(pool.name)
        reading = brk.next_state(pool.breaker_state, members, faulty,
                                 open_above=cb.open_above_percent, close_below=cb.close_below_percent,
                                 min_nodes=cb.min_nodes)
        return reading.state == brk.OPEN

    def reconcile_pool(self, name: str) -> float | None:
        pool = self._fleet.pool_named(name)
        if pool is None:
            error = self._fleet.invalid_pools.get(name)
            obj = self._fleet.pool_informer.get(name)
            if error and obj is not None:
                self._write_pool_status(obj, {**(obj.get("status") or {}), "providers": "",
                                              "observedGeneration": obj.get("metadata", {}).get("generation", 0)},
                                        [("Valid", False, "InvalidSpec", error),
                                         ("RepairProviderReady", False, "InvalidSpec",
                                          "the pool's spec is invalid: the controller does not act on its nodes")])
            return None
        cb = pool.config.circuit_breaker
        members, faulty = self._fleet.counts(name)
        reading = brk.next_state(pool.breaker_state, members, faulty, open_above=cb.open_above_percent,
                                 close_below=cb.close_below_percent, min_nodes=cb.min_nodes)
        self._metrics.breaker_open.labels(name).set(1 if reading.state == brk.OPEN else 0)
        if pool.default:
            return None  # no GpuNodePool object to write to: `autoclusters status` shows these pools
        old = pool.obj.get("status") or {}
        old_cb = old.get("circuitBreaker") or {}
        changed = reading.state != old_cb.get("state", brk.CLOSED)
        msg = (f"{reading.faulty} of {reading.nodes} nodes ({reading.percent}%) report a fault; "
               f"opens above {cb.open_above_percent}%, closes below {cb.close_below_percent}%")
        status = {
            "nodes": reading.nodes, "faultyNodes": reading.faulty, "faultyPercent": reading.percent,
            "repairsInProgress": self._fleet.in_progress(name),
            "circuitBreaker": {"state": reading.state,
                               "since": utc_iso(self._clock.now()) if changed else old_cb.get("since",
                                                                                          utc_iso(self._clock.now())),
                               "message": msg},
            "observedGeneration": pool.obj.get("metadata", {}).get("generation", 0),
            "providers": "invalid" if pool.provider_error else pool.config.provider.describe(),
        }
        ready = self._provider_condition(pool)
        invalid = ready[2] == HOLD_PROVIDER_INVALID
        valid = ("Valid", not invalid, HOLD_PROVIDER_INVALID if invalid else "Valid",
                 ready[3] if invalid else "the spec is valid")
        stored = self._write_pool_status(pool.obj, status, [valid, ready])
        if stored is None:
            return None
        if changed:
            uid = pool.obj.get("metadata", {}).get("uid", "")
            ref = ObjectRef(api.POOLS.kind, name, api_version=f"{self._names.api_group}/{API_VERSION}", uid=uid)
            if reading.state == brk.OPEN:
                self._recorder.emit(ref, EVENT_BREAKER_OPEN, f"circuit breaker open: automatic repairs paused; {msg}",
                                    warning=True)
            else:
                self._recorder.emit(ref, EVENT_BREAKER_CLOSED, f"circuit breaker closed: repairs resume; {msg}")
                self._fleet.wake_held(name)
        return None
