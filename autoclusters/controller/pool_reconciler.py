"""One reconcile of one pool, under the work-queue key ``pool:<name>`` (see docs/workflow.md,
"Pools"): its circuit breaker (the metric, the status, an event when it opens or closes, and
the pool's held repairs woken when it closes), its status (members, faulty members, repairs in
progress, providers) and its conditions ``Valid`` and ``RepairProviderReady`` (an event on the
pool when one turns False). An invalid GpuNodePool gets both conditions False and nothing else.

``RepairProviderReady`` asks each of the pool's providers whether it accepts each member; the
answers are kept between passes (``PoolRefusals``), and a pass asks only about the members
changed since the last (``Fleet.track_members``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autoclusters import api
from autoclusters.clock import Clock, utc_iso
from autoclusters.controller import breaker as brk
from autoclusters.controller.cache import Fleet
from autoclusters.controller.controller_metrics import Metrics
from autoclusters.controller.pool_policy import Pool
from autoclusters.controller.statemachine import (
    HOLD_NO_PROVIDER,
    HOLD_NOT_ALLOW_LISTED,
    HOLD_PROVIDER_INVALID,
    HOLD_PROVIDER_REFUSED,
    ProviderBlock,
)
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.names import EVENT_BREAKER_CLOSED, EVENT_BREAKER_OPEN
from autoclusters.providers.actions import ACTIONS
from autoclusters.providers.base import Provider

JSON = dict[str, Any]
# A pool's provider for an action, or why there is none (``Reconciler._provider``).
ProviderOf = Callable[[Pool, str], tuple[Provider | None, ProviderBlock | None]]


def breaker_reading(pool: Pool, fleet: Fleet) -> brk.BreakerReading:
    """The pool's circuit breaker now, from its state as written and its members' faults."""
    cb = pool.config.circuit_breaker
    members, faulty = fleet.counts(pool.name)
    return brk.next_state(pool.breaker_state, members, faulty, open_above=cb.open_above_percent,
                          close_below=cb.close_below_percent, min_nodes=cb.min_nodes)


@dataclass
class PoolRefusals:
    """A pool's members each of its providers refuses, with the reason: one dict per provider,
    in the order of ``providers`` (distinct objects, in the order of the actions)."""

    providers: tuple[Provider, ...]
    refused: tuple[dict[str, str], ...]


class PoolReconciler:
    def __init__(self, kube: Kube, clock: Clock, fleet: Fleet, recorder: EventRecorder, metrics: Metrics,
                 provider: ProviderOf) -> None:
        self._kube = kube
        self._clock = clock
        self._fleet = fleet
        self._names = fleet.names
        self._recorder = recorder
        self._metrics = metrics
        self._provider = provider
        # pool -> its members' refusals, kept between passes (_provider_condition): each pass asks
        # only about the members changed since the last (fleet.track_members)
        self._refusals: dict[str, PoolRefusals] = {}
        self._member_changes = fleet.track_members()

    def _provider_condition(self, pool: Pool) -> tuple[str, bool, str, str]:
        """RepairProviderReady: every action every pool needs (the action table's ``every_pool``) has a
        provider that accepts every node of the pool."""
        problems: list[ProviderBlock] = []
        providers: list[Provider] = []
        for action in ACTIONS.required():
            provider, block = self._provider(pool, action)
            if block is not None:
                problems.append(block)
                continue
            assert provider is not None
            providers.append(provider)
        if problems:
            first = problems[0]
            if all(b.hold == HOLD_NO_PROVIDER for b in problems):
                missing = ", ".join(b.action for b in problems)
                return ("RepairProviderReady", False, HOLD_NO_PROVIDER,
                        f"no repair provider configured for {missing}: faults are reported and nodes marked, "
                        "repairs are held until spec.provider names one")
            return "RepairProviderReady", False, first.hold, first.message
        known = self._pool_refusals(pool, providers)
        by_kind: dict[str, list[dict[str, str]]] = defaultdict(list)
        for prov, refused in zip(known.providers, known.refused, strict=True):
            if refused:
                by_kind[prov.name].append(refused)
        if by_kind:
            kind = min(by_kind)
            # a node refused by the providers of two actions is named once
            nodes = sorted(set().union(*by_kind[kind]) if len(by_kind[kind]) > 1 else by_kind[kind][0])
            # the reason of the first action whose provider refuses the first node named
            of = {id(prov): refused for prov, refused in zip(known.providers, known.refused, strict=True)}
            why = next((why for prov in providers if (why := of[id(prov)].get(nodes[0], ""))), "")
            return ("RepairProviderReady", False, HOLD_PROVIDER_REFUSED,
                    f"the {kind} provider refuses {len(nodes)} node(s) of the pool ({', '.join(nodes[:5])}): {why}")
        return ("RepairProviderReady", True, "ProvidersReady",
                f"providers: {pool.config.provider.describe()}")

    def recheck_providers(self) -> None:
        """Forget every pool's kept refusals: each pool's next pass asks about every member again.
        The resync's safety net: a provider's answer may also depend on the cluster (whether it
        serves Cluster API Machines), not only on the node, and that changes no node."""
        self._refusals.clear()

    def _pool_refusals(self, pool: Pool, providers: list[Provider]) -> PoolRefusals:
        """The pool's refusals brought up to date. The pool reconciles on every change of its
        faulty count, so a pass asks each distinct provider only about the members changed since
        the last pass (joined, left, or changed as ``Fleet`` fingerprints a node): the work is the
        changed nodes', not the pool's. New providers (the pool's spec changed) ask about all."""
        distinct = tuple({id(prov): prov for prov in providers}.values())
        changed = self._member_changes.take(pool.name)
        known = self._refusals.get(pool.name)
        if known is None or len(known.providers) != len(distinct) or \
                any(a is not b for a, b in zip(known.providers, distinct, strict=True)):
            known = PoolRefusals(distinct, tuple({} for _ in distinct))
            self._refusals[pool.name] = known
            asked = self._fleet.member_nodes(pool.name)
        else:
            for refused in known.refused:
                for name in changed:
                    refused.pop(name, None)  # a node that left the pool is not asked again
            asked = self._fleet.member_nodes(pool.name, among=changed)
        for name, node in asked:
            for prov, refused in zip(distinct, known.refused, strict=True):
                if why := prov.refusal(node):
                    refused[name] = why
        return known

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
            stored = self._kube.patch(Kube.custom_path(self._names.api_group, api.VERSION, api.POOLS.plural, name)
                                      + "/status", {"status": status})
        except NotFound:
            return None
        self._fleet.pool_written(stored)
        ref = ObjectRef(api.POOLS.kind, name, api_version=f"{self._names.api_group}/{api.VERSION}",
                        uid=obj.get("metadata", {}).get("uid", ""))
        for reason, message in turned_false:
            self._recorder.emit(ref, reason, message, warning=True)
        return stored

    def reconcile(self, name: str) -> float | None:
        """The pool's status, conditions and breaker; never asks to be looked at again by itself (None)."""
        pool = self._fleet.pool_named(name)
        if pool is None or pool.default:  # no GpuNodePool object: no condition kept up to date
            self._refusals.pop(name, None)
            self._member_changes.take(name)
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
        reading = breaker_reading(pool, self._fleet)
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
        invalid = ready[2] in (HOLD_PROVIDER_INVALID, HOLD_NOT_ALLOW_LISTED)
        valid = ("Valid", not invalid, ready[2] if invalid else "Valid",
                 ready[3] if invalid else "the spec is valid")
        stored = self._write_pool_status(pool.obj, status, [valid, ready])
        if stored is None:
            return None
        if changed:
            uid = pool.obj.get("metadata", {}).get("uid", "")
            ref = ObjectRef(api.POOLS.kind, name, api_version=f"{self._names.api_group}/{api.VERSION}", uid=uid)
            if reading.state == brk.OPEN:
                self._recorder.emit(ref, EVENT_BREAKER_OPEN, f"circuit breaker open: automatic repairs paused; {msg}",
                                    warning=True)
            else:
                self._recorder.emit(ref, EVENT_BREAKER_CLOSED, f"circuit breaker closed: repairs resume; {msg}")
                self._fleet.wake_held(name)
        return None
