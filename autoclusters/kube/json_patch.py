"""JSON patch guards that test only what a patch depends on.

A JSON patch (RFC 6902) computed from an object read earlier is safe against another writer
when its ``test`` operations hold. Testing the whole object's ``resourceVersion`` is the
blunt guard: any change of the object (a status heartbeat, another controller's annotation)
fails the patch, and the writer reads and patches again. :func:`field_tests` derives the
narrow guard instead, from the operations themselves:

- ``remove`` / ``replace`` of a value: that value is still what was read (nothing removes
  or overwrites what another writer changed meanwhile);
- ``add`` into a list (``/spec/taints/-`` or an index): the whole list is still what was read
  (no duplicate entry, no shifted index);
- ``add`` of a scalar under a map key (a label, an annotation, ``/spec/unschedulable``): no
  test; the key ends up with the value the writer decided on whatever happened to the map's
  other keys;
- ``add`` of a whole map or list under a key: the existing one is still what was read; when
  the key was absent the patch needs the whole-object guard (JSON patch cannot test that a
  member is absent), and :func:`field_tests` says so by returning ``None``.

Tests the caller wrote itself are kept where they are; the derived ones go first, so they
test the object as read, before any operation of the patch changes it.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
_MISSING = object()


def pointer(key: str) -> str:
    """One JSON pointer segment (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def resolve(doc: Any, path: str) -> Any:
    """The value at ``path`` in ``doc``, or ``_MISSING``."""
    if path == "":
        return doc
    cur = doc
    for raw in path.split("/")[1:]:
        seg = _unescape(raw)
        if isinstance(cur, dict):
            if seg not in cur:
                return _MISSING
            cur = cur[seg]
        elif isinstance(cur, list):
            if not seg.isdigit() or int(seg) >= len(cur):
                return _MISSING
            cur = cur[int(seg)]
        else:
            return _MISSING
    return cur


def field_tests(doc: JSON, ops: list[JSON]) -> list[JSON] | None:
    """The ``test`` operations that make ``ops`` (computed from ``doc``) safe, or ``None`` when
    only the whole object's resourceVersion can (a container added where there was none)."""
    tests: list[JSON] = []
    tested = {op["path"] for op in ops if op["op"] == "test"}

    def test(path: str, value: Any) -> None:
        if path not in tested:
            tested.add(path)
            tests.append({"op": "test", "path": path, "value": value})

    for op in ops:
        kind, path = op["op"], op["path"]
        if kind in ("remove", "replace"):
            current = resolve(doc, path)
            if current is _MISSING:
                return None  # nothing there as read: let the server's answer decide under the whole guard
            test(path, current)
        elif kind == "add":
            parent_path, _, last = path.rpartition("/")
            parent = resolve(doc, parent_path)
            if isinstance(parent, list):
                test(parent_path, parent)
            elif isinstance(parent, dict):
                current = parent.get(_unescape(last), _MISSING)
                if isinstance(op.get("value"), (dict, list)):
                    if current is _MISSING:
                        return None
                    test(path, current)
            else:
                return None
        elif kind != "test":
            return None  # move/copy: not used here; keep the blunt guard
    return tests
