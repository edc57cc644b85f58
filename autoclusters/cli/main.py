"""Entry point of the ``autoclusters`` command; exit codes scripts can rely on: ``cli/exit_codes.py``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

import autoclusters.cli as cli_pkg
from autoclusters import __version__
from autoclusters.cli.exit_codes import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, CliError
from autoclusters.kube.errors import KubeError, Unavailable
from autoclusters.names import NameError_


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoclusters",
        description="Detect GPU faults on Kubernetes nodes and repair the nodes under per-pool consent modes.",
    )
    parser.add_argument("--version", action="version", version=f"autoclusters {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(cli_pkg.__path__), key=lambda m: m.name):
        if mod.name in {"main", "exit_codes"} or mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{cli_pkg.__name__}.{mod.name}")
        register = getattr(module, "register", None)
        if register:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at the exit: a reader gone is answered below
        return code
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except NameError_ as e:  # AUTOCLUSTERS_DOMAIN / AUTOCLUSTERS_CONDITION_PREFIX unusable
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Unavailable as e:
        print(f"error: cannot reach the cluster: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KubeError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # Whoever read the output stopped reading (`| head`): not a fault to trace back. Output
        # not all written is a failure; stdout goes to /dev/null so the exit's flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
