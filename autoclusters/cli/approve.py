"""``autoclusters approve NODE...`` / ``approve --pool POOL``: approve proposed repairs.

Only nodes that carry ``<domain>/maintenance-required=true`` are approved. Exit codes
scripts can rely on: 0 every node approved or already done (approved before, or its
fault cleared), 1 at least one real failure (no such node, a refusal), 2 bad usage,
3 the cluster could not be reached.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoclusters.cli._cluster import add_cluster_flags, connect
from autoclusters.cli._output import add_output_flag, print_json, print_table
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from autoclusters.ops.approval import ApprovalResult, ApprovalStatus, approve_nodes, approve_pool


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "approve", help="approve the proposed repair of nodes (only those that need one)",
        description="Adds the maintenance-approved=true label to nodes that carry maintenance-required=true. "
                    "A node whose fault already cleared is reported as done. Exit codes: 0 all approved or "
                    "done, 1 a failure, 2 bad usage, 3 cluster unreachable.")
    p.add_argument("nodes", nargs="*", metavar="NODE", help="node(s) to approve")
    p.add_argument("--pool", default=None, help="approve every node of this pool that needs a repair")
    p.add_argument("--dry-run", action="store_true", help="show what would be approved, change nothing")
    add_cluster_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_approve)


def run_approve(args: argparse.Namespace) -> int:
    if bool(args.nodes) == bool(args.pool):
        raise CliError("give either NODE... or --pool POOL", EXIT_USAGE)
    kube, names = connect(args, "autoclusters-approve")
    if args.pool:
        outcome = approve_pool(kube, names, args.pool, dry_run=args.dry_run)
        if not outcome.exists:
            raise CliError(f"no pool {args.pool!r}: no GpuNodePool object and no node labelled "
                           f"{names.pool_label}={args.pool}", EXIT_FAILED)
        results = outcome.results
    else:
        results = approve_nodes(kube, names, args.nodes, dry_run=args.dry_run)
    ok = all(r.status.done for r in results)
    if args.output == "json":
        print_json({"pool": args.pool, "dryRun": args.dry_run, "ok": ok, "results": [r.to_dict() for r in results]})
    else:
        if results:
            print_table(["NODE", "POOL", "RESULT", "MESSAGE"],
                        [[r.node, r.pool or "-", r.status.value, r.message] for r in results])
        print(summary(results, args.pool), file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


def summary(results: list[ApprovalResult], pool: str | None) -> str:
    if not results:
        return f"nothing to approve in pool {pool}: no node needs a repair" if pool else "nothing to approve"
    counts: dict[ApprovalStatus, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    order = list(ApprovalStatus)
    return ", ".join(f"{n} {s.value}" for s, n in sorted(counts.items(), key=lambda kv: order.index(kv[0])))
