"""A file name says what its module holds, once: no two modules of the package share one.

The one exception is a subcommand's module of ``cli/``: it is named after the subcommand it
registers (``cli/controller.py`` is ``autoclusters controller``, ``cli/slurm_bridge.py``
``autoclusters slurm-bridge``), which is often the name of the part it runs or prints too
(``deploy/controller.py`` builds the controller's objects, ``ops/history.py`` reads what
``autoclusters history`` shows). Every other module of ``cli/`` (the entry point, the exit
codes, the helpers whose names start with ``_``) gets a name of its own like any module.
Package directories are not file names: ``controller/`` beside ``deploy/controller.py`` is
the part and the builder of its objects.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autoclusters"
NOT_SUBCOMMANDS = {"__init__", "main", "exit_codes"}  # and the helpers: _cluster.py, _output.py


def _subcommand(path: Path) -> str | None:
    """The name a module's ``register(subparsers)`` gives its subcommand: the first
    ``add_parser`` call's first argument; None for a module without one."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "register":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                        and call.func.attr == "add_parser" and call.args \
                        and isinstance(call.args[0], ast.Constant):
                    return str(call.args[0].value)
    return None


def _is_subcommand_module(path: Path, package: Path) -> bool:
    return path.parent == package / "cli" and path.stem not in NOT_SUBCOMMANDS \
        and not path.stem.startswith("_") and _subcommand(path) == path.stem.replace("_", "-")


def shared_file_names(package: Path) -> dict[str, list[str]]:
    """file name -> the modules (paths in ``package``) that share it, past the one exception."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.stem in {"__init__", "__main__"} or _is_subcommand_module(path, package):
            continue
        by_name.setdefault(path.name, []).append(str(path.relative_to(package)))
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_of_the_package_share_a_file_name() -> None:
    assert shared_file_names(PACKAGE) == {}


def test_every_subcommand_module_is_named_after_its_subcommand() -> None:
    """What makes the exception hold: each module of cli/ but the entry point, the exit codes and
    the ``_`` helpers registers one subcommand, named as the file is (``_`` for ``-``)."""
    modules = [p for p in sorted((PACKAGE / "cli").glob("*.py"))
               if p.stem not in NOT_SUBCOMMANDS and not p.stem.startswith("_")]
    assert len(modules) >= 10
    assert {p.stem: _subcommand(p) for p in modules} == {p.stem: p.stem.replace("_", "-") for p in modules}


def test_the_rule_on_a_tree_of_its_own(tmp_path: Path) -> None:
    """Two metrics.py are refused, as a cli/ helper named like a module elsewhere is; a subcommand's
    module named after its subcommand is not, and neither is one whose subcommand has another name."""
    files = {
        "controller/metrics.py": "", "detector/metrics.py": "", "kube/errors.py": "", "cli/errors.py": "",
        "deploy/controller.py": "",
        "cli/controller.py": "def register(sub):\n    p = sub.add_parser('controller')\n    p.add_parser('run')\n",
        "deploy/slurm_bridge.py": "",
        "cli/slurm_bridge.py": "def register(sub):\n    sub.add_parser(\n        'slurm-bridge', help='x')\n",
        "ops/history.py": "", "cli/history.py": "def register(sub):\n    sub.add_parser('repairs')\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert shared_file_names(tmp_path) == {
        "errors.py": ["cli/errors.py", "kube/errors.py"],
        "history.py": ["cli/history.py", "ops/history.py"],
        "metrics.py": ["controller/metrics.py", "detector/metrics.py"],
    }


def test_no_folder_of_the_package_is_another_one_in_the_plural() -> None:
    """As ``policy/`` (the Python) stood beside ``policies/`` (the Rego): the Python is ``rego/``."""
    names = {d for _, dirs, _ in os.walk(PACKAGE) for d in dirs if d != "__pycache__"}
    assert "policies" in names
    assert sorted(n for n in names if _plural(n) in names) == []


def _plural(name: str) -> str:
    return f"{name[:-1]}ies" if name.endswith("y") else f"{name}s"


def test_the_plural_is_the_plural() -> None:
    assert [_plural(n) for n in ("policy", "pool", "provider")] == ["policies", "pools", "providers"]
