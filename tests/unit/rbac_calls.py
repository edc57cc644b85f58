"""An identity's RBAC rules against the calls its code makes (issue 25: least privilege that
cannot drift): the fake API server records every request; each is read as the authorizer
reads it (API group, resource with its subresource, verb, namespace, name) and must be granted
by one rule, and every rule must be used by one call.

Scope: a ClusterRole's rule holds everywhere, a Role's in its namespace; ``resourceNames``
limit a rule to those names (a list, a watch or a create carries none and is not granted by
such a rule, as in Kubernetes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.unit.fakeapi import FakeApi, Request, _parse

VERBS = {"GET": "get", "LIST": "list", "WATCH": "watch", "POST": "create", "PUT": "update", "PATCH": "patch",
         "DELETE": "delete"}


@dataclass(frozen=True)
class Call:
    group: str
    resource: str  # plural, or plural/subresource
    verb: str
    namespace: str  # "" for a cluster-scoped object
    name: str  # "" for a list, a watch or a create

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{'/' + self.name if self.name else ''}{where}"


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    verb: str
    namespace: str | None  # None: cluster-wide (a ClusterRole)
    names: frozenset[str]  # empty: any name

    def allows(self, c: Call) -> bool:
        return (self.group == c.group and self.resource == c.resource and self.verb == c.verb
                and (self.namespace is None or self.namespace == c.namespace)
                and (not self.names or c.name in self.names))


def call_of(req: Request) -> Call:
    ref = _parse(req.path.split("?", 1)[0])
    group = "" if ref.prefix == "/api/v1" else ref.prefix.split("/")[2]
    resource = f"{ref.plural}/{ref.sub}" if ref.sub else ref.plural
    # a list, a watch and a create of a collection name no object; a subresource's create does
    # (pods/<name>/eviction)
    name = "" if req.verb in ("LIST", "WATCH") or (req.verb == "POST" and not ref.sub) else ref.name
    return Call(group, resource, VERBS[req.verb], ref.namespace, name)


def calls(api: FakeApi) -> set[Call]:
    """What the code asked, discovery documents left out (no RBAC rule governs them)."""
    return {call_of(r) for r in api.requests if _parse(r.path.split("?", 1)[0]).plural}


def grants(objects: Iterable[dict[str, Any]], subject: str) -> set[Grant]:
    """The rules bound to the service account ``subject`` (``namespace:name``) among ``objects``."""
    ns, sa = subject.split(":")
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("ClusterRole", "Role")}
    out: set[Grant] = set()
    for b in objects:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == sa and s.get("namespace") == ns
                   for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role = roles[(ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"])]
        scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        for rule in role["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add(Grant(g, r, v, scope, frozenset(rule.get("resourceNames") or ())))
    return out


def ungranted(made: set[Call], given: set[Grant]) -> list[str]:
    return sorted(str(c) for c in made if not any(g.allows(c) for g in given))


def unused(made: set[Call], given: set[Grant]) -> list[str]:
    return sorted(f"{g.verb} {g.group or 'core'}/{g.resource}" + (f" {sorted(g.names)}" if g.names else "")
                  for g in given if not any(g.allows(c) for c in made))
