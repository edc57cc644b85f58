"""``autoclusters pool set-mode POOL auto|propose|off``: change who decides when a pool's repairs start."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoclusters.api import ConsentMode
from autoclusters.cli._cluster import add_cluster_flags, connect
from autoclusters.cli._output import add_output_flag, print_json
from autoclusters.cli.exit_codes import EXIT_FAILED, CliError
from autoclusters.ops.consent import PoolNotFound, set_consent_mode


def register(subparsers: Any) -> None:
    pool = subparsers.add_parser("pool", help="change a GPU node pool's consent mode")
    sub = pool.add_subparsers(dest="pool_command", metavar="ACTION", required=True)
    p = sub.add_parser(
        "set-mode", help=f"set a pool's consent mode ({', '.join(ConsentMode)})",
        description="Sets GpuNodePool spec.consentMode. It applies to the next decision: a repair already "
                    "started completes. A pool managed by Pulumi or git drifts from its source until the next "
                    "deployment puts the source's value back.")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("mode", choices=[m.value for m in ConsentMode], metavar="MODE", help=", ".join(ConsentMode))
    p.add_argument("--dry-run", action="store_true", help="show the change, make none")
    add_cluster_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_set_mode)


def run_set_mode(args: argparse.Namespace) -> int:
    kube, names = connect(args, "autoclusters-pool")
    try:
        change = set_consent_mode(kube, names, args.pool, args.mode, dry_run=args.dry_run)
    except PoolNotFound as e:
        raise CliError(str(e), EXIT_FAILED) from e
    if args.output == "json":
        print_json(change.to_dict())
    elif not change.changed:
        print(f"pool {change.pool}: consent mode is already {change.new}")
    else:
        verb = "would change" if change.dry_run else "changed"
        print(f"pool {change.pool}: consent mode {verb} from {change.old} to {change.new}")
        if change.new == ConsentMode.OFF and not change.dry_run:
            print("  repairs not yet started are cancelled; conditions are still reported", file=sys.stderr)
    return 0
