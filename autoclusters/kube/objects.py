"""Reading Kubernetes objects (plain dicts): conditions, readiness, label selectors.

Pure functions, shared by the controller, the operator tools, the local cluster and the
demo, so that every part of the system agrees on what "Ready" and "selected" mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def condition(obj: Mapping[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    """The status condition of type ``ctype``, or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def node_ready(node: Mapping[str, Any] | None) -> bool:
    return (condition(node, "Ready") or {}).get("status") == "True"


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) applied to a label set.

    A bare mapping without either key is read as matchLabels, the way selectors written by
    hand often spell it; an operator Kubernetes does not know matches nothing.
    """
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        present = key in labels
        if op not in _OPERATORS:
            return False
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True
