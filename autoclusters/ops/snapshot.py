"""The fleet at a glance: pools and their repair state, and every node that has a fault.

``take_snapshot`` reads nodes, ``GpuNodePool`` objects and ``Remediation`` records once
(three paged list calls, side by side) and ``build_snapshot`` joins them without
touching the API server, so the join is unit-tested on plain dicts. When a CRD is not
installed the snapshot still shows what the nodes' conditions and labels say and carries
a note naming what is missing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from autoclusters import api
from autoclusters.api import BreakerState, ConsentMode
from autoclusters.clock import Clock, parse_iso, utc_iso
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.providers import ProviderSettingsError, parse_provider_choice
from autoclusters.detector.conditions import parse_sources
from autoclusters.detector.source_records import SourceState
from autoclusters.kube import Kube
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.ops import resources as res
from autoclusters.ops.repairs import (
    AWAITING_PHASES,
    HOLDING_PHASES,
    REPAIRING_PHASES,
    Repair,
    repair_from_object,
)
from autoclusters.pools import default_pool

JSON = dict[str, Any]

BREAKER_OPEN, BREAKER_CLOSED, BREAKER_UNKNOWN = "open", "closed", "unknown"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PoolSummary:
    name: str
    consent_mode: str  # "" when the pool has nodes but no GpuNodePool object
    nodes: int
    ready: int
    faulty: int
    awaiting_approval: int | None  # None: no Remediation records to count from
    repairing: int | None
    failed: int | None
    breaker: str
    has_object: bool
    default_policy: bool = False  # no GpuNodePool: the nodes' pool label, under the cluster default policy

    def to_dict(self) -> JSON:
        return {"name": self.name, "consentMode": self.consent_mode or None, "nodes": self.nodes,
                "ready": self.ready, "faulty": self.faulty, "awaitingApproval": self.awaiting_approval,
                "repairing": self.repairing, "failed": self.failed, "breaker": self.breaker,
                "poolObject": self.has_object, "defaultPolicy": self.default_policy}


@dataclass(frozen=True)
class DefaultPolicy:
    """The cluster default policy in force (``pools.default_pool``), as ``autoclusters status`` shows it."""

    consent_mode: str
    providers: str  # "reset=hostReboot replace=clusterapi", "none"
    source: str  # the ConfigMap, or "reference default"
    error: str = ""

    def to_dict(self) -> JSON:
        return {"consentMode": self.consent_mode, "providers": self.providers, "source": self.source,
                "error": self.error or None}


def default_policy_of(configmap: JSON | None, namespace: str) -> DefaultPolicy:
    spec, error = default_pool.spec_of(configmap)
    try:
        providers = parse_provider_choice(spec.get("provider")).describe()
    except ProviderSettingsError as e:
        providers, error = "invalid", error or str(e)
    source = f"ConfigMap {namespace}/{default_pool.CONFIGMAP}" if configmap is not None else (
        f"reference default (no ConfigMap {namespace}/{default_pool.CONFIGMAP})")
    return DefaultPolicy(str(spec.get("consentMode", api.DEFAULT_CONSENT_MODE)), providers, source, error)


@dataclass(frozen=True)
class FaultyNode:
    node: str
    pool: str
    condition: str  # the fault condition type that is True ("" when only the label says so)
    reason: str
    message: str
    since: datetime | None
    required: bool  # carries <domain>/maintenance-required=true
    approved: bool  # carries <domain>/maintenance-approved=true (an approval only while ``required``)
    tainted: bool
    cordoned: bool
    ready: bool
    repair: Repair | None  # the node's open Remediation record

    @property
    def stray_approval(self) -> bool:
        """The approval label without maintenance-required behind it: it approves nothing, and the
        controller removes it (MaintenanceApprovalRemoved; docs/contract.md, "Admission rules")."""
        return self.approved and not self.required

    @property
    def phase(self) -> str:
        """The open record's phase, with the reason it is held when it waits on a guard."""
        if not self.repair:
            return ""
        return f"{self.repair.phase} ({self.repair.hold})" if self.repair.hold else self.repair.phase

    def age(self, now: datetime) -> float | None:
        start = self.since or (self.repair.started if self.repair else None)
        return max(0.0, (now - start).total_seconds()) if start else None

    def to_dict(self, now: datetime) -> JSON:
        age = self.age(now)
        return {"node": self.node, "pool": self.pool or None, "condition": self.condition or None,
                "reason": self.reason or None, "message": self.message or None,
                "since": utc_iso(self.since) if self.since else None,
                "ageSeconds": None if age is None else round(age, 1),
                "labels": {"maintenanceRequired": self.required, "maintenanceApproved": self.approved},
                "strayApproval": self.stray_approval,
                "tainted": self.tainted, "cordoned": self.cordoned, "ready": self.ready,
                "repair": None if self.repair is None else {
                    "name": self.repair.name, "phase": self.repair.phase, "hold": self.repair.hold or None,
                    "action": self.repair.action}}


@dataclass(frozen=True)
class NodeSources:
    """What a node's detector says of its sources (the end of its health condition's message)."""

    node: str
    pool: str
    sources: dict[str, SourceState]

    def to_dict(self) -> JSON:
        return {"node": self.node, "pool": self.pool or None,
                "sources": {name: {"state": str(st.status), "reason": st.reason or None, "expected": st.expected}
                            for name, st in sorted(self.sources.items())}}


@dataclass(frozen=True)
class FleetSnapshot:
    taken_at: datetime
    pools: list[PoolSummary]
    faulty: list[FaultyNode]
    nodes: int
    degraded_detectors: list[str]  # nodes whose detector cannot read a source (never a GPU fault)
    pools_installed: bool
    records_installed: bool
    notes: list[str] = field(default_factory=list)
    default_policy: DefaultPolicy | None = None
    detector_sources: list[NodeSources] = field(default_factory=list)  # by node name

    def to_dict(self) -> JSON:
        return {"time": utc_iso(self.taken_at), "nodes": self.nodes,
                "crds": {"gpuNodePools": self.pools_installed, "remediations": self.records_installed},
                "defaultPolicy": self.default_policy.to_dict() if self.default_policy else None,
                "pools": [p.to_dict() for p in self.pools],
                "faultyNodes": [f.to_dict(self.taken_at) for f in self.faulty],
                "degradedDetectors": self.degraded_detectors,
                "detectorSources": [s.to_dict() for s in self.detector_sources], "notes": self.notes}


def take_snapshot(kube: Kube, names: Names, clock: Clock, namespace: str = DEFAULT_NAMESPACE) -> FleetSnapshot:
    """Reads the lists at once (the snapshot then costs the slowest of them, not their sum)."""
    with ThreadPoolExecutor(max_workers=4) as ex:
        nodes = ex.submit(kube.list_nodes)
        pools = ex.submit(res.list_pools, kube, names)
        records = ex.submit(res.list_remediations, kube, names)
        default = ex.submit(res.get_default_policy, kube, namespace)
        return build_snapshot(nodes.result(), pools.result(), records.result(), names, clock.now(),
                              default_policy=default_policy_of(default.result(), namespace))


def _conditions(node: JSON) -> dict[str, JSON]:
    return {c.get("type", ""): c for c in (node.get("status") or {}).get("conditions") or []}


def breaker_state(pool: JSON) -> str:
    """The circuit breaker as the controller writes it (``status.circuitBreaker.state``, Open or
    Closed); ``unknown`` until a controller has written it."""
    state = (((pool.get("status") or {}).get("circuitBreaker")) or {}).get("state")
    shown: dict[str, str] = {BreakerState.OPEN: BREAKER_OPEN, BreakerState.CLOSED: BREAKER_CLOSED}
    return shown.get(str(state), BREAKER_UNKNOWN)


def _open_repairs_by_node(records: list[JSON]) -> dict[str, Repair]:
    latest: dict[str, Repair] = {}
    for obj in records:
        r = repair_from_object(obj)
        if not r.open or not r.node:
            continue
        cur = latest.get(r.node)
        if cur is None or _start_key(r) > _start_key(cur):
            latest[r.node] = r
    return latest


def _start_key(r: Repair) -> tuple[datetime, str]:
    """Newest record wins; the name breaks ties so the choice is stable."""
    return (r.started or _EPOCH, r.name)


def build_snapshot(nodes: list[JSON], pools: list[JSON] | None, records: list[JSON] | None, names: Names,
                   now: datetime, *, default_policy: DefaultPolicy | None = None) -> FleetSnapshot:
    pool_objs = pools or []
    open_repairs = _open_repairs_by_node(records or [])
    notes: list[str] = []
    if pools is None:
        notes.append(f"the GpuNodePool CRD (gpunodepools.{names.api_group}) is not installed: pools are taken "
                     f"from the {names.pool_label} node label, without consent modes or breaker state")
    if records is None:
        notes.append(f"the Remediation CRD (remediations.{names.api_group}) is not installed: repair phases "
                     "and history are not available")

    default_on = default_policy is not None and default_policy.consent_mode != ConsentMode.OFF
    pool_of, invalid = res.pool_reader(pools, names, default=default_on)
    if default_policy is not None and default_policy.error:
        notes.append(f"the cluster default policy's {default_policy.source} is not used: {default_policy.error}")
    notes += [f"GpuNodePool {name} is invalid and ignored by the controller: {err}"
              for name, err in sorted(invalid.items())]
    by_pool: dict[str, list[JSON]] = {str(p["metadata"]["name"]): [] for p in pool_objs}
    node_pool: dict[str, str] = {}
    faulty: list[FaultyNode] = []
    degraded: list[str] = []
    sources: list[NodeSources] = []
    for node in nodes:
        name = str(node["metadata"]["name"])
        pool = pool_of(node)
        node_pool[name] = pool
        if pool:
            by_pool.setdefault(pool, []).append(node)
        conds = _conditions(node)
        health = conds.get(names.detector_health_condition, {})
        if health.get("status") == "True":
            degraded.append(name)
        listed = parse_sources(str(health.get("message", "")))
        if listed:
            sources.append(NodeSources(name, pool, listed))
        fault = next((conds[t] for t in names.fault_conditions if conds.get(t, {}).get("status") == "True"), None)
        labels = res.labels_of(node)
        required = labels.get(names.maintenance_required) == "true"
        repair = open_repairs.get(name)
        if fault is None and not required and repair is None:
            continue
        taints = (node.get("spec") or {}).get("taints") or []
        faulty.append(FaultyNode(
            node=name, pool=pool,
            condition=str(fault.get("type", "")) if fault else "",
            reason=str(fault.get("reason", "")) if fault else (repair.fault_reason if repair else ""),
            message=str(fault.get("message", "")) if fault else (repair.fault_message if repair else ""),
            since=_parse(fault.get("lastTransitionTime")) if fault else None,
            required=required,
            approved=labels.get(names.maintenance_approved) == "true",
            tainted=any(t.get("key") == names.taint_key for t in taints),
            cordoned=bool((node.get("spec") or {}).get("unschedulable")),
            ready=node_ready(node),
            repair=repair,
        ))

    obj_by_name = {str(p["metadata"]["name"]): p for p in pool_objs}
    faulty_by_pool: dict[str, int] = {}
    for f in faulty:
        faulty_by_pool[f.pool] = faulty_by_pool.get(f.pool, 0) + 1
    summaries = []
    for pool_name in sorted(by_pool):
        members = by_pool[pool_name]
        obj = obj_by_name.get(pool_name)
        repairs = [r for r in open_repairs.values() if (r.pool or node_pool.get(r.node)) == pool_name]
        counted = records is not None
        by_default = obj is None and default_on and pools is not None and pool_name not in invalid
        mode = str(((obj or {}).get("spec") or {}).get("consentMode", api.DEFAULT_CONSENT_MODE)) if obj else ""
        if by_default and default_policy is not None:
            mode = default_policy.consent_mode
        summaries.append(PoolSummary(
            name=pool_name,
            consent_mode=mode,
            nodes=len(members),
            ready=sum(1 for m in members if node_ready(m)),
            faulty=faulty_by_pool.get(pool_name, 0),
            awaiting_approval=sum(r.phase in AWAITING_PHASES for r in repairs) if counted else None,
            repairing=sum(r.phase in REPAIRING_PHASES for r in repairs) if counted else None,
            failed=sum(r.phase in HOLDING_PHASES for r in repairs) if counted else None,
            breaker=breaker_state(obj) if obj else BREAKER_UNKNOWN,
            has_object=obj is not None,
            default_policy=by_default,
        ))
    faulty.sort(key=lambda f: (f.pool, f.node))
    return FleetSnapshot(taken_at=now, pools=summaries, faulty=faulty, nodes=len(nodes),
                         degraded_detectors=sorted(degraded), pools_installed=pools is not None,
                         records_installed=records is not None, notes=notes, default_policy=default_policy,
                         detector_sources=sorted(sources, key=lambda s: s.node))


def _parse(value: Any) -> datetime | None:
    try:
        return parse_iso(value) if isinstance(value, str) else None
    except ValueError:
        return None
