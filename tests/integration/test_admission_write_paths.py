"""The label rules on every path that writes a Node's labels (issue 25, item 1), against the
real API server: the Node and its ``status`` subresource, through create, update (PUT), JSON
patch, merge patch, strategic merge patch and server-side apply; for each forbidden change, as
a user with node write rights, as a kubelet (``system:node:<name>``, on its own node) and as the
detector's service account (the detector's grant, ``nodes/status`` patch, a token bound to the
node); a node's own identities may not touch the approval either. Each
case runs with the webhook alone and with the CEL floor alone (the ``layer`` fixture of
test_admission.py), and every refusal is checked for the layer and the rule that gave it.

Each forbidden write is set up by the controller's identity through the same path (so the
controller's writes are shown to pass on every path too): the node is brought to the old
labels, the actor asks for the new ones, the answer must be a refusal naming the rule, and
the node must still carry the old labels.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from autoclusters.deploy import DEFAULT_NAMESPACE, DETECTOR_SERVICE_ACCOUNT
from autoclusters.deploy.detector import detector_username
from autoclusters.kube import Kube, KubeError, NotFound, load_kube
from autoclusters.kube.client import APPLY, JSON_PATCH, MERGE, STRATEGIC
from autoclusters.kube.json_patch import pointer
from tests.integration.test_admission import (
    FLOOR_MARK,
    LAYERS,
    SCOPE_LABEL,
    WEBHOOK_MARK,
    Admission,
    admission_env,
    switch_layer,
)

JSON = dict[str, Any]
Labels = dict[str, str | None]  # the two maintenance labels; None: absent
APPLY_MANAGER = "adm-test-apply"  # one field manager for every apply, so an apply can also remove a label

REQUIRED_ONLY = "maintenance-required-controller-only"
APPROVED_VALUE = "maintenance-approved-value"
REQUIRES_FAULT = "maintenance-approved-requires-fault"
NOT_BY_NODES = "maintenance-approved-not-by-nodes"
NODE_ACTORS = ("kubelet", "detector")  # a node's own identities: they may not touch the approval either


def _mark(layer: str) -> str:
    return WEBHOOK_MARK if layer == "webhook" else FLOOR_MARK


admission = pytest.fixture(scope="module", name="admission")(admission_env)
layer = pytest.fixture(scope="module", params=LAYERS, name="layer")(switch_layer)


# --- the write paths ------------------------------------------------------------------------
# Each write is made by ``kube`` (the identity under test); what a PUT or a JSON patch is computed
# from is read by ``reader`` (the admin: reading is not what is tested, and a detector may not).
Write = Callable[[Kube, Kube, str, str, Labels], JSON]


def _node_path(name: str, sub: str) -> str:
    return f"/api/v1/nodes/{name}" + (f"/{sub}" if sub else "")


def _put(kube: Kube, reader: Kube, name: str, sub: str, want: Labels) -> JSON:
    obj = reader.get(_node_path(name, sub))
    labels = obj["metadata"].setdefault("labels", {})
    for key, value in want.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    obj["metadata"].pop("resourceVersion", None)  # Nodes take an unconditional update: no race with heartbeats
    return kube.replace(_node_path(name, sub), obj)


def _json_patch(kube: Kube, reader: Kube, name: str, sub: str, want: Labels) -> JSON:
    have = reader.get(_node_path(name, sub))["metadata"].get("labels") or {}
    ops = []
    for key, value in want.items():
        path = f"/metadata/labels/{pointer(key)}"
        if value is None:
            if key in have:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return kube.patch(_node_path(name, sub), ops, JSON_PATCH)


def _merge(kind: str) -> Write:
    def write(kube: Kube, reader: Kube, name: str, sub: str, want: Labels) -> JSON:
        return kube.patch(_node_path(name, sub), {"metadata": {"labels": dict(want)}}, kind)
    return write


def _apply(kube: Kube, reader: Kube, name: str, sub: str, want: Labels) -> JSON:
    """Server-side apply: the labels this manager applies are the present ones; one it applied
    before and leaves out now is removed (when no other manager owns it: see ``_set_up``)."""
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {k: v for k, v in want.items() if v is not None}}}
    return kube.patch(_node_path(name, sub), body, APPLY, fieldManager=APPLY_MANAGER, force=True)


WRITES: dict[str, Write] = {
    "update": _put, "json-patch": _json_patch, "merge-patch": _merge(MERGE),
    "strategic-merge-patch": _merge(STRATEGIC), "apply": _apply,
}
PATCHES = ("json-patch", "merge-patch", "strategic-merge-patch", "apply")  # all the detector's role allows
# Every path that writes a Node's labels, written out here rather than taken from NODE_RESOURCES:
# the test must try a path the rules might leave out.
SUBRESOURCES = ("", "status")


def _set_up(adm: Admission, controller: Kube, node: str, write: str, sub: str, labels: Labels) -> None:
    """The controller (exempt) brings the node to ``labels`` through the path under test, from a
    node without either label: so the apply manager alone owns what it applied, and an apply
    that leaves a label out really removes it."""
    _merge(MERGE)(controller, adm.kube, node, "", dict.fromkeys(labels))
    WRITES[write](controller, adm.kube, node, sub, labels)
    assert _two(adm, node) == labels, f"the controller's {write} of nodes/{sub} did not take"


@dataclass(frozen=True)
class Forbidden:
    """A change of the two labels from ``old`` to ``new`` that no one but the controller may make
    (``rule`` names the rule that refuses it)."""

    name: str
    old: Labels
    new: Labels
    rule: str


def _forbidden(req: str, appr: str, actor: str) -> list[Forbidden]:
    """The changes ``actor`` may not make; the rule named is the one both layers report (the
    CEL floor reports the first validation a write fails, the webhook every rule)."""
    cases = [
        Forbidden("approve-a-healthy-node", {req: None, appr: None}, {req: None, appr: "true"}, REQUIRES_FAULT),
        Forbidden("add-required", {req: None, appr: None}, {req: "true", appr: None}, REQUIRED_ONLY),
        Forbidden("remove-required", {req: "true", appr: None}, {req: None, appr: None}, REQUIRED_ONLY),
        Forbidden("approve-with-another-value", {req: "true", appr: None}, {req: "true", appr: "yes"},
                  APPROVED_VALUE),
    ]
    if actor in NODE_ACTORS:
        cases += [
            Forbidden("approve-its-own-repair", {req: "true", appr: None}, {req: "true", appr: "true"}, NOT_BY_NODES),
            Forbidden("withdraw-an-approval", {req: "true", appr: "true"}, {req: "true", appr: None}, NOT_BY_NODES),
        ]
    return cases


@dataclass
class Actors:
    node: str  # the node every case writes to (the kubelet's and the detector's own)
    kubes: dict[str, Kube]  # user, kubelet, detector, controller
    usernames: dict[str, str]


@pytest.fixture(scope="module")
def actors(admission: Admission) -> Iterator[Actors]:
    adm = admission
    name = f"adm-{adm.suffix}-paths"
    adm.kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": name, "labels": {SCOPE_LABEL: adm.suffix}}})
    adm.nodes.append(name)
    role = f"adm-test-detector-{adm.suffix}"
    # the detector's own identity (the policies' default node agent), with the detector's grant
    adm.cluster.apply([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": DETECTOR_SERVICE_ACCOUNT, "namespace": DEFAULT_NAMESPACE}]},
    ])
    try:
        detector = adm.cluster.service_account_kubeconfig(DEFAULT_NAMESPACE, DETECTOR_SERVICE_ACCOUNT, node=name)
        yield Actors(name, {"user": load_kube(adm.user), "kubelet": load_kube(adm.kubelet_kubeconfig(name)),
                            "detector": load_kube(detector), "controller": load_kube(adm.controller)},
                     {"user": f"system:serviceaccount:{adm.namespace}:alice", "kubelet": f"system:node:{name}",
                      "detector": detector_username()})
    finally:
        for path in (f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}"):
            with contextlib.suppress(NotFound):
                adm.kube.delete(path)


def _two(adm: Admission, node: str) -> Labels:
    labels = adm.kube.get_node(node)["metadata"].get("labels") or {}
    return {k: labels.get(k) for k in (adm.names.maintenance_required, adm.names.maintenance_approved)}


def _paths(actor: str) -> list[tuple[str, str]]:
    writes = PATCHES if actor == "detector" else tuple(WRITES)
    subs = ("status",) if actor == "detector" else SUBRESOURCES
    return [(w, s) for s in subs for w in writes]


@pytest.mark.parametrize("actor", ["user", "kubelet", "detector"])
def test_every_forbidden_change_is_refused_on_every_write_path(admission: Admission, layer: str, actors: Actors,
                                                               actor: str) -> None:
    adm, node = admission, actors.node
    controller, kube = actors.kubes["controller"], actors.kubes[actor]
    refused: list[str] = []
    let_through: list[str] = []
    cases = _forbidden(adm.names.maintenance_required, adm.names.maintenance_approved, actor)
    for case in cases:
        for write, sub in _paths(actor):
            where = f"{case.name} by {write} of nodes{'/' + sub if sub else ''}"
            _set_up(adm, controller, node, write, sub, case.old)
            try:
                WRITES[write](kube, adm.kube, node, sub, case.new)
            except KubeError as e:
                text = str(e)
                assert _mark(layer) in text and f"[{case.rule}]" in text, f"{where}: refused by something else: {e}"
                if case.rule in (REQUIRED_ONLY, NOT_BY_NODES):
                    assert actors.usernames[actor] in text, f"{where}: the message does not name who asked"
                refused.append(where)
            else:
                let_through.append(where)
            assert _two(adm, node) == case.old or where in let_through, f"{where}: refused, yet the labels changed"
    assert not let_through, f"{layer} let {len(let_through)} forbidden writes through: {let_through}"
    assert len(refused) == len(cases) * len(_paths(actor))


def test_a_status_write_cannot_create_a_node(admission: Admission, layer: str, actors: Actors) -> None:
    """The status path has no create: a POST there is not a way around the create rules."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": actors.node, "labels": {admission.names.maintenance_required: "true"}}}
    with pytest.raises(KubeError) as e:
        actors.kubes["user"].create(_node_path(actors.node, "status"), body)
    assert e.value.status == 405, e.value


def test_every_forbidden_create_is_refused(admission: Admission, layer: str, actors: Actors) -> None:
    """CREATE (a user's manifest, or a kubelet registering its node) with each forbidden label
    set; a kubelet may create only its own node, a name that does not exist yet."""
    adm = admission
    req, appr = adm.names.maintenance_required, adm.names.maintenance_approved
    fresh = f"adm-{adm.suffix}-reg-{layer}-paths"
    kubelet = load_kube(adm.kubelet_kubeconfig(fresh))
    # the CEL floor names the first rule a write breaks, so each case breaks the one it names first
    cases = [({appr: "true"}, REQUIRES_FAULT), ({req: "true"}, REQUIRED_ONLY), ({appr: "yes"}, APPROVED_VALUE)]
    for who, kube in (("user", actors.kubes["user"]), ("kubelet", kubelet)):
        for labels, rule in cases:
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": fresh, "labels": {SCOPE_LABEL: adm.suffix, **labels}}}
            try:
                kube.create("/api/v1/nodes", body)
            except KubeError as e:
                assert _mark(layer) in str(e) and f"[{rule}]" in str(e), f"{who} {labels}: {e}"
                continue
            adm.nodes.append(fresh)
            raise AssertionError(f"{who} created a node with {labels} through the {layer}")


def test_an_approval_while_required_and_its_withdrawal_pass_on_every_path(admission: Admission, layer: str,
                                                                          actors: Actors) -> None:
    adm, node = admission, actors.node
    req, appr = adm.names.maintenance_required, adm.names.maintenance_approved
    controller = actors.kubes["controller"]
    for actor in ("user",):  # a person: a node's own identities may not (NOT_BY_NODES above)
        for write, sub in _paths(actor):
            _set_up(adm, controller, node, write, sub, {req: "true", appr: None})
            try:
                WRITES[write](actors.kubes[actor], adm.kube, node, sub, {req: "true", appr: "true"})
                assert _two(adm, node) == {req: "true", appr: "true"}
                WRITES[write](actors.kubes[actor], adm.kube, node, sub, {req: "true", appr: None})
            except KubeError as e:
                raise AssertionError(f"{actor} by {write} of nodes/{sub}: {e}") from e
            assert _two(adm, node) == {req: "true", appr: None}
    _merge(MERGE)(controller, adm.kube, node, "", {req: None, appr: None})


def _webhook_reviews(adm: Admission) -> float:
    ctx = ssl.create_default_context(cafile=str(adm.workdir / "certs" / "ca.crt"))
    with urllib.request.urlopen(f"https://127.0.0.1:{adm.port}/metrics", timeout=5, context=ctx) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("autoclusters_webhook_reviews_total{"))


@pytest.mark.parametrize("layer", ["webhook"], indirect=True)  # it counts the webhook's reviews
def test_status_traffic_that_leaves_the_labels_alone_never_reaches_the_webhook(admission: Admission, layer: str,
                                                                                actors: Actors) -> None:
    """What a kubelet sends every few seconds (conditions, its other labels) passes the webhook's
    matchConditions without a call: the review count does not move. A label change on the same
    path is reviewed (the count moves by one)."""
    adm, node = admission, actors.node
    before = _webhook_reviews(adm)
    for i in range(5):
        actors.kubes["kubelet"].patch(_node_path(node, "status"), {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "AdmissionTest", "message": f"heartbeat {i}"}]}},
            STRATEGIC)
        actors.kubes["kubelet"].patch(_node_path(node, "status"), {"metadata": {"labels": {"team": f"t{i}"}}},
                                      STRATEGIC)
    assert _webhook_reviews(adm) == before
    with pytest.raises(KubeError):
        actors.kubes["kubelet"].patch(_node_path(node, "status"),
                                      {"metadata": {"labels": {adm.names.maintenance_approved: "true"}}}, STRATEGIC)
    assert _webhook_reviews(adm) == before + 1
