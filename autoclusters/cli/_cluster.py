"""The flags every cluster-facing operator command shares, and the connection they describe."""

from __future__ import annotations

import argparse
from typing import Any

from autoclusters.cli.exit_codes import EXIT_UNREACHABLE, EXIT_USAGE, CliError
from autoclusters.kube import Kube, KubeError, load_kube
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX, NameError_, Names


def add_cluster_flags(parser: Any) -> None:
    parser.add_argument("--kubeconfig", default=None, metavar="PATH",
                        help="kubeconfig to use (default: $KUBECONFIG, in-cluster, or ~/.kube/config)")
    parser.add_argument("--domain", default=None,
                        help=f"label domain (default: $AUTOCLUSTERS_DOMAIN or {DEFAULT_DOMAIN}; "
                             "crusoe.ai for the reference system's names)")
    parser.add_argument("--condition-prefix", default=None,
                        help=f"condition prefix (default: $AUTOCLUSTERS_CONDITION_PREFIX or {DEFAULT_PREFIX})")


def names_from_args(args: argparse.Namespace) -> Names:
    env = Names.from_env() if args.domain is None or args.condition_prefix is None else None
    try:
        return Names(domain=args.domain or (env.domain if env else DEFAULT_DOMAIN),
                     prefix=args.condition_prefix or (env.prefix if env else DEFAULT_PREFIX))
    except NameError_ as e:
        raise CliError(str(e), EXIT_USAGE) from e


def connect(args: argparse.Namespace, user_agent: str) -> tuple[Kube, Names]:
    names = names_from_args(args)
    try:
        kube = load_kube(args.kubeconfig, user_agent=user_agent)
    except KubeError as e:
        raise CliError(str(e), EXIT_UNREACHABLE) from e
    return kube, names
