"""The layers of docs/architecture.md, checked: only the client layer imports the
``kubernetes`` library, no module imports from a layer above its own (the package, the
deploy bundle ``components/`` and ``examples/``), no import cycle, not even inside a rank, an
import inside a function only where ``LAZY_IMPORTS`` says why, the package imports neither of
those two, the simulation is reached only through its doors, and the table in
docs/architecture.md shows exactly these ranks."""

from __future__ import annotations

import ast
import functools
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
    "redact": 0, "capture": 0, "allow_lists": 0,
    "kube": 1,
    # deploy/ derives the CRD, the parser and the roles from providers/
    "faults": 2, "pools": 2, "deploy": 2, "providers": 2,
    "controller.statemachine": 3, "controller.messages": 3, "controller.breaker": 3, "controller.drain": 3,
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
# it but the ``simulated`` provider's declaration (providers/simulated.py), the one door from
# the product's layers (the other door, ``detector run --simulate``, is a command above it).
SIMULATION_DOORS = {("providers.simulated", "sim.provider")}
# Imports of the package (or of components/) are written at the top of a module. The modules
# below also import some inside a function, each for the reason given; no other module may
# (an import inside a function to dodge a cycle is refused twice: here, and by the cycle test,
# which counts every import wherever it stands). Third-party imports are not concerned (the
# client layer loads the ``kubernetes`` library only when it needs it, the NVML source
# ``nvidia-ml-py`` only if installed).
#
# cli/main.py loads every subcommand's module to build its parser, in every process the
# command starts (the detector on each GPU node, the controller, the webhook, the bridge); so a
# subcommand's module loads the machinery of its subcommand when that subcommand runs.
LAZY_IMPORTS = {
    "cli.controller": "`controller run` loads the controller (its informers, providers, Prometheus "
                      "client) and `controller manifests` the CRD and RBAC builders, in no other command",
    "cli.detector": "`detector run` loads the node agent (and, with --simulate, the simulation: one of "
                    "its two doors) and `detector inventory` NVML, so no other process holds either",
    "cli.dev": "`dev ...` loads the local control plane (devcluster/), which no deployed process runs",
    "cli.inject_fault": "loads the simulated hardware (sim/) only when a fault is injected: the door of "
                        "the simulation stays with the commands that use it",
    "cli.slurm_bridge": "`slurm-bridge run` loads the bridge and its Slurm client, in no other command",
    "cli.webhook": "`webhook run` loads the webhook's aiohttp server and OPA decider, in no other command",
    # the simulation loads only when a pool names the simulated provider: the door the product's
    # layers reach it by (SIMULATION_DOORS); a deployed controller never loads it
    "providers.simulated": "the simulated provider's builder loads the simulation when a pool names it",
    # the deploy bundle is not installed with the package: the local stack's program is loaded
    # from a checkout, when the local stack is deployed (KNOWN_BUNDLE_IMPORTS)
    "devcluster.pulumi_env": "components/stack.py, the Pulumi program, exists only in a checkout",
    # Pulumi dynamic providers: Pulumi serializes the provider object and runs its methods in a
    # provider process of its own; each method imports what it uses when it runs there
    "/components.node_cleanup": "a dynamic provider's method runs in Pulumi's provider process",
    "/components.simulated_node": "a dynamic provider's method runs in Pulumi's provider process",
}

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


def _modules(root: Path = ROOT) -> list[tuple[str, Path]]:
    """(name, path) of every module: package modules by their name without ``autoclusters.``,
    those of components/ and examples/ as ``/components....`` and ``/examples....``."""
    mods = []
    for path in sorted((root / "autoclusters").rglob("*.py")):
        rel = path.relative_to(root / "autoclusters").with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if name:
            mods.append((name, path))
    for top in OUTSIDE:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            mods.append(("/" + ".".join(p for p in rel.parts if p != "__init__"), path))
    return mods


def _resolve(importer: str, is_package: bool, node: ast.Import | ast.ImportFrom, names: set[str]) -> list[str]:
    """The modules of ``names`` (as ``_modules`` names them) that one import statement of module
    ``importer`` (an ``__init__.py`` when ``is_package``) loads by name: ``from a.b import c`` is
    module ``a.b.c`` when there is one, else ``a.b``; ``import a.b.c`` the longest of ``a.b.c``,
    ``a.b``, ``a`` that is a module."""

    def ours(absolute: str) -> str | None:
        if absolute.startswith("autoclusters."):
            name = absolute.removeprefix("autoclusters.")
        elif absolute.split(".")[0] in OUTSIDE:
            name = "/" + absolute
        else:
            return None
        return name if name in names else None

    found = []
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the importer's package (its own, for an __init__.py)
            dotted = importer[1:] if importer.startswith("/") else f"autoclusters.{importer}"
            package = dotted.split(".")[:None if is_package else -1]
            package = package[:len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        for alias in node.names:
            target = ours(f"{base}.{alias.name}") or ours(base)
            if target:
                found.append(target)
    else:
        for alias in node.names:
            parts = alias.name.split(".")
            for n in range(len(parts), 0, -1):
                target = ours(".".join(parts[:n]))
                if target:
                    found.append(target)
                    break
    return [f for f in found if f != importer]


def _import_graph(root: Path = ROOT) -> dict[str, dict[str, bool]]:
    """module -> {module it imports: whether every such import stands inside a function}. Every
    import counts, at the top, under ``if TYPE_CHECKING:`` or inside a function."""
    modules = dict(_modules(root))
    names = set(modules)
    graph: dict[str, dict[str, bool]] = {}
    for name, path in modules.items():
        edges: dict[str, bool] = {}
        for node, in_function in _statements_of(path):
            for target in _resolve(name, path.name == "__init__.py", node, names):
                edges[target] = edges.get(target, True) and in_function
        graph[name] = edges
    return graph


@functools.cache
def _statements_of(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    return _import_statements(ast.parse(path.read_text()))


def _import_statements(tree: ast.AST, in_function: bool = False) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement of a module, and whether it stands inside a function."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append((child, in_function))
        else:
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            found += _import_statements(child, inner)
    return found


def _cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The import cycles: each strongly connected set of two or more modules, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe(cycle: list[str], graph: dict[str, dict[str, bool]]) -> str:
    ties = [f"{a} -> {b}{' (inside a function)' if graph[a][b] else ''}"
            for a in cycle for b in sorted(graph[a]) if b in cycle]
    return "; ".join(ties)


def _lazy_importers(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the package (or components/) it imports inside a function."""
    modules = dict(_modules(root))
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        for node, in_function in _statements_of(path):
            if in_function:
                found.setdefault(name, set()).update(_resolve(name, path.name == "__init__.py", node, set(modules)))
    return {k: v for k, v in found.items() if v}


def test_no_import_cycle() -> None:
    """No two modules import each other, directly or around a circle, also inside one rank (the
    layer test above lets a rank's modules import each other), and also where one of the imports
    stands inside a function: an import moved into a function to break a cycle still counts."""
    graph = _import_graph()
    assert [_describe(c, graph) for c in _cycles(graph)] == []


def test_imports_inside_functions_are_the_listed_ones() -> None:
    """A module imports the package inside a function only when ``LAZY_IMPORTS`` lists it, with
    why; a listed module that no longer does so leaves the list."""
    assert sorted(_lazy_importers()) == sorted(LAZY_IMPORTS)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_cycle_check_finds_a_cycle_inside_a_rank_and_one_hidden_in_a_function(tmp_path: Path) -> None:
    """The checks above, on a tree of their own: two modules of one package that import each other
    (one of them inside a function, as the two cycles this test found were hidden), a circle of
    three, a relative import, and modules that only import one way, which pass."""
    root = _tree(tmp_path, {
        "autoclusters/__init__.py": "",
        "autoclusters/pools/__init__.py": "",
        "autoclusters/pools/config.py": "def check():\n    from autoclusters.pools.default import spec\n",
        "autoclusters/pools/default.py": "from autoclusters.pools import config\n",
        "autoclusters/kube/__init__.py": "from .client import Kube\n",
        "autoclusters/kube/client.py": "from .errors import Bad\nclass Kube: ...\n",
        "autoclusters/kube/errors.py": "class Bad(Exception): ...\n",
        "autoclusters/a.py": "import autoclusters.b\n",
        "autoclusters/b.py": "from autoclusters import c\n",
        "autoclusters/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autoclusters.a import x\n",
        "components/x.py": "from autoclusters.kube import Kube\nfrom autoclusters.kube.errors import Bad\n",
    })
    graph = _import_graph(root)
    assert graph["kube.client"] == {"kube.errors": False}  # the relative imports, resolved
    assert graph["kube"] == {"kube.client": False}
    assert graph["/components.x"] == {"kube": False, "kube.errors": False}
    assert _cycles(graph) == [["a", "b", "c"], ["pools.config", "pools.default"]]
    assert _describe(["pools.config", "pools.default"], graph) == (
        "pools.config -> pools.default (inside a function); pools.default -> pools.config")
    assert _lazy_importers(root) == {"pools.config": {"pools.default"}}
    (root / "autoclusters/pools/config.py").write_text("def check() -> None: ...\n")  # the cycle broken
    _statements_of.cache_clear()
    assert _cycles(_import_graph(root)) == [["a", "b", "c"]]


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
    asked to (inside a function, never when their module loads): the simulated provider's builder when a pool names
    the ``simulated`` type, the detector command when told ``--simulate``. A controller or an
    agent on real nodes never has the simulation in its process."""
    sim_rank = RANKS["sim"]
    found = {(name, imported.removeprefix("autoclusters.")) for name, path in _modules()
             if not name.startswith("/") and _rank(name)[1] < sim_rank
             for imported in _imports(path) if imported.startswith("autoclusters.sim")}
    assert found == SIMULATION_DOORS
    for door in (PACKAGE / "providers" / "simulated.py", PACKAGE / "cli" / "detector.py"):
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


def test_providers_import_nothing_of_the_controller_or_deploy() -> None:
    """A provider is a plug-in: what it shares with the controller (the operation, its state and
    view, the action table, the declaration types) lives in ``providers/``, and no module there
    imports ``controller/`` (the state machine's rank would allow it; this rule does not). Nor
    ``deploy/``, which derives the CRD schema, the parser and the roles from the registry: what
    a provider shares with ``deploy/`` lives in ``providers/`` (the reboot Job's shape, the
    setting types) or below (the allow-lists document, the host reboot command's default)."""
    found = [(name, imported) for name, path in _modules() if name.split(".")[0] == "providers"
             for imported in _imports(path) if imported.split(".")[:2] in (["autoclusters", "controller"],
                                                                          ["autoclusters", "deploy"])]
    assert found == []
