"""The layers of docs/architecture.md, checked: only the client layer imports the
``kubernetes`` library, no module imports from a layer above its own (the package, the
deploy bundle ``components/`` and ``examples/``), the package imports neither of those two,
the simulation is reached only through its doors, and the table in docs/architecture.md shows exactly these ranks."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autoclusters"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Lower number = lower layer. Longest matching prefix wins. Keys are modules of the
# ``autoclusters`` package; OUTSIDE holds the top-level folders around it.
RANKS = {
    "api": 0, "pool_fields": 0, "doc_tables": 0, "names": 0, "clock": 0, "certificates": 0, "memo": 0, "repeats": 0,
    "redact": 0, "capture": 0,
    "kube": 1,
    "faults": 2, "pools": 2, "deploy": 2,
    "controller.statemachine": 3, "controller.messages": 3, "controller.breaker": 3, "controller.drain": 3,
    "providers": 3,
    "detector": 4, "controller": 4, "webhook": 4, "rego": 4, "ops": 4, "slurm": 4,
    "devcluster": 5, "sim": 5,
    "cli": 6, "demo": 6,
    "cli.main": 7,  # loads every command module; none of them imports it back
}
OUTSIDE = {"components": 5, "examples": 7}
# The package is installed without components/ and examples/; this one import of the deploy
# bundle (the local stack's Pulumi program) is still to go (issue 13, item 7).
KNOWN_BUNDLE_IMPORTS = {("devcluster.pulumi_env", "components.stack")}
# The simulation (``sim/``) stands above the product it stands in for: nothing below it imports
# it but the provider registry's entry for the ``simulated`` provider type, the one door from
# the product's layers (the other door, ``detector run --simulate``, is a command above it).
SIMULATION_DOORS = {("providers.registry", "sim.provider")}


def _rank(module: str) -> tuple[str, int]:
    top = module.split(".")[0]
    if module.startswith("/"):
        return top, OUTSIDE[module[1:].split(".")[0]]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in RANKS:
            return key, RANKS[key]
    raise AssertionError(f"module autoclusters.{module} has no layer in RANKS: add it")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "autoclusters":
                out += [f"autoclusters.{a.name}" for a in node.names]
            else:
                out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def _modules() -> list[tuple[str, Path]]:
    """(name, path) of every module: package modules by their name without ``autoclusters.``,
    those of components/ and examples/ as ``/components....`` and ``/examples....``."""
    mods = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if name:
            mods.append((name, path))
    for top in OUTSIDE:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            mods.append(("/" + ".".join(p for p in rel.parts if p != "__init__"), path))
    return mods


def test_only_the_client_layer_imports_the_kubernetes_library() -> None:
    offenders = [name for name, path in _modules() if not name.startswith("kube")
                 and any(i == "kubernetes" or i.startswith("kubernetes.") for i in _imports(path))]
    assert offenders == []


def test_no_module_imports_from_a_higher_layer() -> None:
    violations = []
    for name, path in _modules():
        own_key, own = _rank(name)
        for imported in _imports(path):
            if imported.split(".")[0] in OUTSIDE:
                target = "/" + imported
            elif imported.startswith("autoclusters.") and imported != "autoclusters.__init__":
                target = imported.removeprefix("autoclusters.")
                if target in {"", "__version__"}:
                    continue
            else:
                continue
            key, rank = _rank(target)
            if rank > own and key != own_key and (name, target) not in SIMULATION_DOORS:
                violations.append(f"{name} (layer {own}) imports {target} (layer {rank})")
    assert violations == []


def test_the_package_does_not_import_the_deploy_bundle_or_the_examples() -> None:
    found = {(name, imported) for name, path in _modules() if not name.startswith("/")
             for imported in _imports(path) if imported.split(".")[0] in OUTSIDE}
    assert found == KNOWN_BUNDLE_IMPORTS


def _loads_the_simulation_when_imported(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any((isinstance(n, ast.ImportFrom) and (n.module or "").startswith("autoclusters.sim"))
               or (isinstance(n, ast.Import) and any(a.name.startswith("autoclusters.sim") for a in n.names))
               for n in tree.body)


def test_the_simulation_is_reached_only_through_its_doors() -> None:
    """Below the simulation's rank only the doors import it, and both doors load it only when
    asked to (inside a function, never when their module loads): the registry when a pool names
    the ``simulated`` type, the detector command when told ``--simulate``. A controller or an
    agent on real nodes never has the simulation in its process."""
    sim_rank = RANKS["sim"]
    found = {(name, imported.removeprefix("autoclusters.")) for name, path in _modules()
             if not name.startswith("/") and _rank(name)[1] < sim_rank
             for imported in _imports(path) if imported.startswith("autoclusters.sim")}
    assert found == SIMULATION_DOORS
    for door in (PACKAGE / "providers" / "registry.py", PACKAGE / "cli" / "detector.py"):
        assert not _loads_the_simulation_when_imported(door), door
    assert "autoclusters.sim.fleet" in _imports(PACKAGE / "cli" / "detector.py")


def test_every_simulation_module_loads_on_its_own() -> None:
    """No import cycle through a door: each module of sim/ imports first in a fresh process."""
    for path in sorted((PACKAGE / "sim").glob("*.py")):
        module = "autoclusters.sim" + ("" if path.stem == "__init__" else f".{path.stem}")
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=ROOT)


def test_the_api_module_imports_nothing_of_the_package() -> None:
    """``api`` is the bottom of rank 0: the others of its rank (``names``) build on it."""
    assert [i for i in _imports(PACKAGE / "api.py") if i.split(".")[0] == "autoclusters"] == []


def test_every_module_has_a_layer() -> None:
    for name, _ in _modules():
        if name != "__main__":
            _rank(name)


def test_the_architecture_page_shows_these_ranks() -> None:
    """Each row of the layers table names its rank and the modules of that rank."""
    table = ARCHITECTURE.read_text().split("<!-- layers-table", 1)[1].split("\n\n", 1)[0]
    shown: dict[str, int] = {}
    for row in table.splitlines()[3:]:
        cells = row.split("|")
        for ref in re.findall(r"`([^`]+)`", cells[3]):
            key = ref.removesuffix("/").removesuffix(".py").replace("/", ".")
            shown[key] = int(cells[1])
    expected = {**RANKS, **OUTSIDE}
    assert shown == expected
