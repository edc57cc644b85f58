"""``autoclusters uninstall``: take every mark of ours off the nodes, after the parts that write them are gone.

``pulumi destroy`` runs the same cleanup (``components/node_cleanup.py``); for what ``manifests/``
created, run this before deleting the rest (docs/deploy.md, "Removal").
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoclusters.cli._cluster import add_cluster_flags, connect
from autoclusters.cli._output import add_output_flag, print_json
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_OK, CliError
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.ops.uninstall import StillRunning, uninstall


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "uninstall", help="remove every label, taint, cordon, annotation and condition autoclusters put on nodes",
        description="Removes the maintenance labels and taint, the drain warning and acknowledgements, Karpenter "
                    "guards autoclusters added, the Slurm bridge's annotations and the detector's conditions from "
                    "every node (and the warning from every pod), and lifts a cordon only where autoclusters "
                    "cordoned the node. A node in mid-repair whose cordon cannot be lifted safely (a reset or "
                    "replacement under way, a failed repair) keeps it: each is printed as LEFT with the command "
                    "that removes it, and the exit status is 1. Refuses while the controller, the detector or the "
                    "label admission is still there (they would write the marks back or refuse the removal), "
                    "unless --stop deletes them first.")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"the controller's namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed; change nothing")
    p.add_argument("--stop", action="store_true",
                   help="first delete the controller's Deployments, the detector's DaemonSet and the label admission "
                        "(policy binding, webhook configuration)")
    p.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for them to be gone (default 120)")
    add_cluster_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_uninstall)


def run_uninstall(args: argparse.Namespace) -> int:
    kube, names = connect(args, "autoclusters-uninstall")
    try:
        report = uninstall(kube, names, args.namespace, stop=args.stop, wait_seconds=args.wait,
                           dry_run=args.dry_run)
    except StillRunning as e:
        raise CliError(f"{e}; stop them first, or pass --stop", EXIT_FAILED) from e
    if args.output == "json":
        print_json(report.to_dict())
    else:
        lines = report.lines()
        for line in lines:
            print(line)
        if not lines:
            print("no marks of autoclusters on any node or pod")
    if report.left:
        print(f"{len(report.left)} thing(s) left on nodes; see the LEFT lines", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
