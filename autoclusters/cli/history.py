"""``autoclusters history [NODE]``: past and current repairs, from the Remediation records."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from autoclusters.cli._cluster import add_cluster_flags, connect
from autoclusters.cli._output import add_output_flag, print_json, print_table
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_USAGE, CliError
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.ops.durations import DurationError, human_duration, parse_since
from autoclusters.ops.history import HistoryQuery, RecordsNotInstalled, list_repairs
from autoclusters.ops.repairs import Repair


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "history", help="list repairs from the Remediation records (kept 90 days); with NODE, each timeline",
        description="Repairs as the controller recorded them: fault, consent mode, action, phase and outcome, "
                    "start, duration and replacement node. With NODE (the repaired node or its replacement), "
                    "each repair's step timeline follows the table.")
    p.add_argument("node", nargs="?", default=None, metavar="NODE", help="only repairs of this node")
    p.add_argument("--pool", default=None, help="only repairs in this pool")
    p.add_argument("--since", default=None, metavar="WHEN",
                   help="only repairs active since WHEN: a duration back from now (30m, 24h, 7d) or a time")
    add_cluster_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_history)


def run_history(args: argparse.Namespace) -> int:
    clock = SystemClock()
    now = clock.now()
    try:
        since = parse_since(args.since, now) if args.since else None
    except DurationError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    kube, names = connect(args, "autoclusters-history")
    try:
        repairs = list_repairs(kube, names, HistoryQuery(node=args.node, pool=args.pool, since=since))
    except RecordsNotInstalled as e:
        raise CliError(str(e), EXIT_FAILED) from e
    if args.output == "json":
        print_json({"time": utc_iso(now), "repairs": [r.to_dict(now) for r in repairs]})
        return 0
    if not repairs:
        what = f" of node {args.node}" if args.node else ""
        where = f" in pool {args.pool}" if args.pool else ""
        print(f"no repairs recorded{what}{where}" + (f" since {utc_iso(since)}" if since else ""))
        return 0
    print_table(["STARTED", "NODE", "POOL", "FAULT", "MODE", "ACTION", "PHASE", "OUTCOME", "DURATION",
                 "REPLACEMENT"], [_row(r, now) for r in repairs])
    if args.node:
        for r in repairs:
            print()
            print_timeline(r, now)
    return 0


def _when(t: datetime | None) -> str:
    return utc_iso(t) if t else "-"


def _row(r: Repair, now: datetime) -> list[str]:
    action = r.action + (" (escalated)" if r.escalated else "")
    duration = human_duration(r.duration(now)) + (" (open)" if r.open else "")
    return [_when(r.started), r.node, r.pool or "-", f"{r.fault} {r.fault_reason}".strip() or "-",
            r.consent_mode or "-", action or "-", r.phase, r.outcome or "-", duration, r.replacement_node or "-"]


def print_timeline(r: Repair, now: datetime) -> None:
    """Each step with its offset from the start and how long the repair stayed in it."""
    print(f"{r.name}: {r.fault_reason} {r.fault_message}".rstrip())
    start = r.started or (r.steps[0].time if r.steps else None)
    rows = []
    for i, s in enumerate(r.steps):
        offset = f"+{human_duration((s.time - start).total_seconds())}" if s.time and start else ""
        nxt = r.steps[i + 1].time if i + 1 < len(r.steps) else (now if r.open else None)
        stayed = human_duration((nxt - s.time).total_seconds()) if nxt and s.time else "-"
        rows.append([f"  {_when(s.time)}", offset, s.phase, stayed, s.message])
    if rows:
        print_table(["  TIME", "AFTER", "PHASE", "IN PHASE", "MESSAGE"], rows)
    else:
        print("  (no steps recorded)")
