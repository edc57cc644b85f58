"""``autoclusters status``: the fleet at a glance (pools, then every node with a fault)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from autoclusters.cli._cluster import add_cluster_flags, connect
from autoclusters.cli._output import add_output_flag, print_json, print_table
from autoclusters.clock import SystemClock
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.detector.source_records import SourceStatus
from autoclusters.ops.durations import human_duration
from autoclusters.ops.snapshot import FaultyNode, FleetSnapshot, NodeSources, take_snapshot


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status", help="show pools (consent mode, faulty nodes, repairs, breaker) and nodes with a fault",
        description="The fleet at a glance: one line per GPU node pool, then one line per node that reports a "
                    "fault, carries the maintenance-required label or has an open repair record.")
    p.add_argument("--pool", default=None, help="show only this pool")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"the controller's namespace, where the cluster default policy lives (default "
                        f"{DEFAULT_NAMESPACE})")
    add_cluster_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    kube, names = connect(args, "autoclusters-status")
    snap = take_snapshot(kube, names, SystemClock(), args.namespace)
    if args.pool:
        pools = [p for p in snap.pools if p.name == args.pool]
        snap = dataclasses.replace(snap, pools=pools, faulty=[f for f in snap.faulty if f.pool == args.pool],
                                   nodes=sum(p.nodes for p in pools),
                                   detector_sources=[s for s in snap.detector_sources if s.pool == args.pool])
    drains = slurm_external_drains(kube.list_nodes(), names.slurm_external_drain, args.pool, names.pool_label)
    if args.output == "json":
        print_json({**snap.to_dict(), "slurmExternalDrains": [{"node": n, "drain": t} for n, t in drains]})
        return 0
    render(snap)
    if drains:
        print()
        print(f"SLURM DRAINS SET OUTSIDE AUTOCLUSTERS ({len(drains)}; reported by the Slurm bridge, not acted on "
              "unless the pool's slurm.actOnExternalDrains)")
        print_table(["NODE", "SLURM REASON"], [[n, t] for n, t in drains])
    return 0


def slurm_external_drains(nodes: list[dict[str, Any]], key: str, pool: str | None,
                          pool_label: str) -> list[tuple[str, str]]:
    """(node, "<reason> by <user> at <time>") for each node whose Slurm drain someone else set."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(key)
        if text and (pool is None or (meta.get("labels") or {}).get(pool_label) == pool):
            out.append((str(meta.get("name")), str(text)))
    return sorted(out)


def _count(v: int | None) -> str:
    return "-" if v is None else str(v)


def _labels(f: FaultyNode) -> str:
    parts = [name for flag, name in ((f.required, "required"), (f.approved and f.required, "approved"),
                                     (f.stray_approval, "stray-approval"), (f.tainted, "tainted"),
                                     (f.cordoned, "cordoned")) if flag]
    if not f.ready:
        parts.append("NotReady")
    return ",".join(parts) or "-"


def _fault(f: FaultyNode, width: int = 70) -> str:
    text = f"{f.reason}: {f.message}" if f.message else (f.reason or "(label only)")
    return text if len(text) <= width else text[: width - 3] + "..."


def render(snap: FleetSnapshot) -> None:
    for note in snap.notes:
        print(f"note: {note}")
    if snap.notes:
        print()
    print(f"POOLS ({len(snap.pools)})")
    if snap.pools:
        print_table(["POOL", "MODE", "NODES", "READY", "FAULTY", "AWAITING", "REPAIRING", "FAILED", "BREAKER"],
                    [[p.name + (" (default policy)" if p.default_policy else ""), p.consent_mode or "-", p.nodes,
                      p.ready, p.faulty, _count(p.awaiting_approval), _count(p.repairing), _count(p.failed),
                      p.breaker] for p in snap.pools])
    else:
        print("  no GPU node pools found")
    d = snap.default_policy
    if d is not None and snap.pools_installed:
        held = " (repairs held until a provider is named)" if d.providers == "none" else ""
        print(f"DEFAULT POLICY for nodes whose pool label names no GpuNodePool: mode {d.consent_mode}, "
              f"providers {d.providers}{held}; from the {d.source}")
    print()
    print(f"FAULTY NODES ({len(snap.faulty)} of {snap.nodes} nodes)")
    if snap.faulty:
        now = snap.taken_at
        print_table(["NODE", "POOL", "FAULT", "LABELS", "PHASE", "AGE"],
                    [[f.node, f.pool or "-", _fault(f), _labels(f), f.phase or "-", human_duration(f.age(now))]
                     for f in snap.faulty])
    else:
        print("  none")
    if snap.degraded_detectors:
        print()
        print(f"DETECTOR DEGRADED (a source cannot be read, or one the hardware implies is missing; not a GPU "
              f"fault): {', '.join(snap.degraded_detectors)}")
    if snap.detector_sources:
        print()
        render_sources(snap.detector_sources)


def _nodes(names: list[str], shown: int = 3) -> str:
    more = f", ... ({len(names)})" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def render_sources(listed: list[NodeSources]) -> None:
    """Nodes grouped by what their detectors say of their sources, then why each one not on is not."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    why: dict[tuple[str, str, str], list[str]] = {}
    for ns in listed:
        cells: dict[SourceStatus, list[str]] = {status: [] for status in SourceStatus}
        for name, st in sorted(ns.sources.items()):
            blind = st.status == SourceStatus.UNAVAILABLE and st.expected
            cells[st.status].append(f"{name} (expected)" if blind else name)
            if st.status != SourceStatus.ON:
                why.setdefault((name, f"{st.status}{' and expected' if blind else ''}", st.reason), []).append(ns.node)
        key = (" ".join(cells[SourceStatus.ON]) or "-", " ".join(cells[SourceStatus.OFF]) or "-",
               " ".join(cells[SourceStatus.UNAVAILABLE]) or "-")
        groups.setdefault(key, []).append(ns.node)
    print(f"DETECTOR SOURCES ({len(listed)} nodes, as each node's detector reports them)")
    print_table(["ON", "OFF", "UNAVAILABLE", "NODES"],
                [[*key, _nodes(nodes)] for key, nodes in sorted(groups.items(), key=lambda kv: -len(kv[1]))])
    for (name, state, reason), nodes in sorted(why.items()):
        print(f"  {name} {state} on {_nodes(nodes)}: {reason or '(no reason given)'}")
