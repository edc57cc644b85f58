"""``autoclusters policy check PATH...``: the admission rules as a GitOps check.

Exit codes: 0 no violation, 1 at least one violation, 2 unreadable or invalid input
(or no OPA to evaluate with), so a pipeline step fails on either.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from autoclusters import allow_lists
from autoclusters.cli._output import add_output_flag, print_json, print_table
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX, NameError_, Names
from autoclusters.rego import InputError, PolicyConfig, check_documents, read_paths
from autoclusters.rego.opa import OpaError
from autoclusters.rego.policy_data import controller_identity


def register(subparsers: Any) -> None:
    policy = subparsers.add_parser("policy", help="check manifests against the autoclusters Rego policies")
    sub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)
    check = sub.add_parser(
        "check", help="check manifests and pool objects (files, directories, '-' for stdin)",
        description="Evaluate the Rego policies over Kubernetes manifests: maintenance labels in manifests, "
                    "approval values, GpuNodePool consent modes. Exits 1 on any violation, 2 on invalid input.")
    check.add_argument("paths", nargs="+", metavar="PATH", help="YAML/JSON file, directory, or - for stdin")
    check.add_argument("--domain", default=None,
                       help=f"label domain (default: $AUTOCLUSTERS_DOMAIN or {DEFAULT_DOMAIN})")
    check.add_argument("--controller", action="append", default=None, metavar="USERNAME",
                       help=f"controller identity (repeatable; default: {controller_identity()})")
    check.add_argument("--policies", default=None, help="policy directory (default: the bundled policies/)")
    check.add_argument(allow_lists.FLAG, default="", metavar="JSON|@FILE",
                       help="the installation's allow-lists (the stack setting allowLists, as JSON, or @FILE "
                            "holding it): pools may name only their commands, images and URLs (default: none)")
    add_output_flag(check)
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    try:
        names = Names.from_env() if args.domain is None else Names(domain=args.domain, prefix=DEFAULT_PREFIX)
    except NameError_ as e:
        raise CliError(str(e), EXIT_USAGE) from e
    raw = args.allow_lists
    try:
        if raw.startswith("@"):
            raw = Path(raw[1:]).read_text()
        lists = allow_lists.from_config(raw, allow_lists.FLAG)
    except (OSError, allow_lists.AllowListError) as e:
        raise CliError(f"{allow_lists.FLAG}: {e}", EXIT_USAGE) from e
    config = PolicyConfig(names=names, controllers=tuple(args.controller or (controller_identity(),)),
                          allow_lists=lists)
    try:
        docs = read_paths(args.paths)
        findings = check_documents(docs, config, policies=Path(args.policies) if args.policies else None)
    except (InputError, OpaError) as e:
        raise CliError(str(e), EXIT_USAGE) from e
    if args.output == "json":
        print_json({"documents": len(docs), "violations": [f.to_dict() for f in findings]}, out=sys.stdout)
    elif findings:
        print_table(["FILE", "DOC", "KIND/NAME", "RULE", "MESSAGE"],
                    [[f.source, f.index if f.item is None else f"{f.index}.{f.item}", f"{f.kind}/{f.name}",
                      f.rule, f.message] for f in findings], out=sys.stdout)
    else:
        print(f"{len(docs)} document(s) checked, no violations", file=sys.stderr)
    return EXIT_FAILED if findings else EXIT_OK

