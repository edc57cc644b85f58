"""The layers of docs/architecture.md, checked: only the client layer imports the
``kubernetes`` library, and no module imports from a layer above its own."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autoclusters"

# Lower number = lower layer. Longest matching prefix wins.
RANKS = {
    "names": 0, "clock": 0,
    "kube": 1,
    "faults": 2, "deploy": 2, "sim": 2,
    "controller.statemachine": 3, "controller.messages": 3, "controller.breaker": 3, "controller.drain": 3,
    "providers": 3,
    "detector": 4, "controller": 4, "webhook": 4, "policy": 4, "ops": 4, "slurm": 4,
    "devcluster": 5,
    "cli": 6, "demo": 6,
}


def _rank(module: str) -> tuple[str, int]:
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
    mods = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if name:
            mods.append((name, path))
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
            if not imported.startswith("autoclusters.") or imported == "autoclusters.__init__":
                continue
            target = imported.removeprefix("autoclusters.")
            if target in {"", "__version__"}:
                continue
            key, rank = _rank(target)
            if rank > own and key != own_key:
                violations.append(f"{name} (layer {own}) imports {target} (layer {rank})")
    assert violations == []


def test_every_module_has_a_layer() -> None:
    for name, _ in _modules():
        if name != "__main__":
            _rank(name)
