"""One fake of the Kubernetes API in the unit tests: ``tests/unit/fakeapi.py``, behind the real
``Kube`` client. No other test code stands in for the client: no class with the client's
methods, no subclass of ``Kube``, no method of a client replaced. What a test needs the API
server to do (fail, race, hang, answer from a script) is a hook of the fake API server."""

from __future__ import annotations

import ast
from pathlib import Path

from autoclusters.kube import Kube

UNIT = Path(__file__).resolve().parent
THE_FAKE = UNIT / "fakeapi.py"
# The client's own verbs: a test class defining two of them (or one, named a Kube) is a second
# fake of the client.
VERBS = frozenset(n for n in vars(Kube) if not n.startswith("_") and callable(getattr(Kube, n)))


def stand_ins(source: str) -> list[str]:
    """What in ``source`` stands in for the client, each as ``line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            verbs = sorted(n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                           and n.name in VERBS)
            if len(verbs) >= 2 or (verbs and "kube" in node.name.lower()):
                found.append(f"{node.lineno}: class {node.name} has the client's {', '.join(verbs)}")
            if any(isinstance(b, ast.Name) and b.id == "Kube" for b in node.bases):
                found.append(f"{node.lineno}: class {node.name} subclasses Kube")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr in VERBS \
                        and "kube" in ast.unparse(target.value).lower():
                    found.append(f"{node.lineno}: {ast.unparse(target)} replaced")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("setattr") and node.args \
                and ast.unparse(node.args[0]) == "Kube":
            found.append(f"{node.lineno}: a method of Kube replaced")
    return found


def test_no_test_code_stands_in_for_the_client() -> None:
    found = {str(p.relative_to(UNIT)): stand_ins(p.read_text()) for p in sorted(UNIT.rglob("*.py"))
             if p != THE_FAKE and "__pycache__" not in p.parts}
    assert {p: f for p, f in found.items() if f} == {}


def test_each_kind_of_stand_in_is_found() -> None:
    assert {"get", "patch", "list_items", "get_node", "patch_node", "watch", "list_with_version"} <= VERBS
    source = '''
class FakeKube:
    def get_node(self, name): ...
    def patch_node(self, name, body): ...
class Racing(Kube):
    pass
class Helper:
    def get(self, path): ...  # one verb alone: a helper's own word
class _Kube:
    def list_items(self, path): ...
def t(h, monkeypatch):
    h.kube.patch = lambda *a: None
    monkeypatch.setattr(Kube, "replace", None)
'''
    assert stand_ins(source) == ["2: class FakeKube has the client's get_node, patch_node",
                                 "5: class Racing subclasses Kube", "9: class _Kube has the client's list_items",
                                 "12: h.kube.patch replaced", "13: a method of Kube replaced"]
