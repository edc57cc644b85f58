"""ValidatingAdmissionPolicies that hold an identity's updates to the fields its code writes,
where RBAC cannot (it grants ``patch`` of a whole object):

- the controller's pod updates change only the pre-drain warning's annotations
  (``Names.warning_annotations``: the one pod patch it makes, ``controller/actuator.py``);
- the Slurm bridge's node updates change only its own annotations
  (``Names.slurm_bridge_annotations``) and ``spec.unschedulable`` (its cordon).

Everything else of the object (spec, labels, other annotations, finalizers, owners) must be
as it was. Each policy matches its identity's username only, so it costs other writers
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE, SLURM_BRIDGE_SERVICE_ACCOUNT
from autoclusters.deploy.admission import _cel_str, admission_policy_binding, validating_policy
from autoclusters.names import Names

# A Node's spec fields (core/v1 NodeSpec) but ``unschedulable``: the bridge changes none of them.
NODE_SPEC_FIELDS = ("podCIDR", "podCIDRs", "providerID", "taints", "configSource", "externalID")


def service_account_username(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _map(obj: str, field: str) -> str:
    return f"(has({obj}.metadata.{field}) ? {obj}.metadata.{field} : {{}})"


def _list(obj: str, field: str) -> str:
    return f"(has({obj}.metadata.{field}) ? {obj}.metadata.{field} : [])"


def _variables(allowed: Sequence[str]) -> list[dict[str, str]]:
    return [{"name": "allowed", "expression": "[" + ", ".join(_cel_str(k) for k in allowed) + "]"},
            {"name": "newAnnotations", "expression": _map("object", "annotations")},
            {"name": "oldAnnotations", "expression": _map("oldObject", "annotations")}]


# The annotations differ between the old and the new object in the allowed keys only (added,
# changed or removed).
ONLY_ALLOWED_ANNOTATIONS_CHANGE = (
    "variables.newAnnotations.all(k, k in variables.allowed || "
    "(k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.newAnnotations[k])) && "
    "variables.oldAnnotations.all(k, k in variables.allowed || k in variables.newAnnotations)")


def same_field_cel(path: str) -> str:
    """True when the optional field ``path`` (below ``object``) is absent in both or equal."""
    return (f"has(object.{path}) == has(oldObject.{path}) && "
            f"(!has(object.{path}) || object.{path} == oldObject.{path})")


def _metadata_validations(who: str, what: str, allowed: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"expression": f"{_map('object', 'labels')} == {_map('oldObject', 'labels')}", "reason": "Forbidden",
         "message": f"{who} may not change a {what}'s labels"},
        {"expression": ONLY_ALLOWED_ANNOTATIONS_CHANGE, "reason": "Forbidden",
         "message": f"{who} may change only these annotations of a {what}: {', '.join(allowed)}"},
        {"expression": (f"{_list('object', 'finalizers')} == {_list('oldObject', 'finalizers')} && "
                        f"{_list('object', 'ownerReferences')} == {_list('oldObject', 'ownerReferences')}"),
         "reason": "Forbidden", "message": f"{who} may not change a {what}'s finalizers or owners"},
    ]


def _policy(name: str, username: str, resource: str, allowed: Sequence[str], validations: list[dict[str, Any]]
            ) -> dict[str, Any]:
    return validating_policy(name, {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["UPDATE"], "resources": [resource]}]},
        "matchConditions": [{"name": "is-the-identity",
                             "expression": f"request.userInfo.username == {_cel_str(username)}"}],
        "variables": _variables(allowed),
        "validations": validations,
    })


def policy_binding(name: str) -> dict[str, Any]:
    return admission_policy_binding(policy_name=name)


def controller_pod_patch_policy(names: Names, namespace: str = DEFAULT_NAMESPACE,
                                name: str = "autoclusters-controller-pod-patches",
                                service_account: str = CONTROLLER_SERVICE_ACCOUNT) -> dict[str, Any]:
    who = "the autoclusters controller"
    return _policy(name, service_account_username(namespace, service_account), "pods", names.warning_annotations, [
        {"expression": "object.spec == oldObject.spec", "reason": "Forbidden",
         "message": f"{who} may not change a pod's spec"},
        *_metadata_validations(who, "pod", names.warning_annotations),
    ])


def slurm_bridge_node_patch_policy(names: Names, namespace: str = DEFAULT_NAMESPACE,
                                   name: str = "autoclusters-slurm-bridge-node-patches",
                                   service_account: str = SLURM_BRIDGE_SERVICE_ACCOUNT) -> dict[str, Any]:
    who = "the autoclusters Slurm bridge"
    return _policy(name, service_account_username(namespace, service_account), "nodes",
                   names.slurm_bridge_annotations, [
        {"expression": " && ".join(f"({same_field_cel('spec.' + f)})" for f in NODE_SPEC_FIELDS),
         "reason": "Forbidden", "message": f"{who} may change only spec.unschedulable of a node's spec"},
        *_metadata_validations(who, "node", names.slurm_bridge_annotations),
    ])
