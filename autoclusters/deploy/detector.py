"""The detector's permissions: what RBAC grants and what admission narrows it to.

RBAC cannot say "your own node only", so the grant is the smallest cluster-wide one the
agent's code uses (read nodes, patch ``nodes/status``, create events) and a
ValidatingAdmissionPolicy narrows every write of the detector's service account to the
node its token is bound to: the API server puts that node's name into the request's
user-info extra ``authentication.kubernetes.io/node-name`` for a token requested for a
pod (or, in tests, bound to the Node object). A request without that extra, for another
node, touching a condition type that is not the detector's, or changing labels is denied.
"""

from __future__ import annotations

from typing import Any

from autoclusters.deploy import DEFAULT_NAMESPACE, DETECTOR_SERVICE_ACCOUNT
from autoclusters.deploy.workloads import cluster_role_binding
from autoclusters.names import Names

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
PART_OF = {"app.kubernetes.io/part-of": "autoclusters"}


def _suffix(namespace: str) -> str:
    return "" if namespace == DEFAULT_NAMESPACE else f"-{namespace}"


def detector_username(namespace: str = DEFAULT_NAMESPACE, service_account: str = DETECTOR_SERVICE_ACCOUNT) -> str:
    return f"system:serviceaccount:{namespace}:{service_account}"


def detector_service_account(namespace: str = DEFAULT_NAMESPACE,
                             service_account: str = DETECTOR_SERVICE_ACCOUNT) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace, "labels": dict(PART_OF)}}


def detector_cluster_role(name: str = "autoclusters-detector", *, simulated_fleet: bool = False) -> dict[str, Any]:
    """The agent on its node reads it (``get``), patches its conditions and creates warning
    events; the simulated fleet (``detector run --simulate``, a local cluster's only) also lists
    and watches the nodes it serves."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"],
             "verbs": ["get", *(["list", "watch"] if simulated_fleet else [])]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ],
    }


def detector_cluster_role_binding(namespace: str = DEFAULT_NAMESPACE, name: str = "autoclusters-detector",
                                  service_account: str = DETECTOR_SERVICE_ACCOUNT) -> dict[str, Any]:
    return cluster_role_binding(name, service_account, namespace)


def _own_types(names: Names) -> str:
    types = (names.gpu_condition, names.interconnect_condition, names.detector_health_condition)
    return "[" + ", ".join(f"'{t}'" for t in types) + "]"


def node_self_write_policy(names: Names, namespace: str = DEFAULT_NAMESPACE,
                           service_account: str = DETECTOR_SERVICE_ACCOUNT,
                           name: str = "autoclusters-detector-own-node") -> dict[str, Any]:
    """The ValidatingAdmissionPolicy that keeps each detector to its own node."""
    node = f"request.userInfo.extra['{NODE_NAME_EXTRA}'][0]"
    own = _own_types(names)
    others = "{0}.status.conditions.filter(c, !(c.type in " + own + "))"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["nodes", "nodes/status", "events"]},
            ]},
            "matchConditions": [{
                "name": "is-the-detector",
                "expression": f"request.userInfo.username == '{detector_username(namespace, service_account)}'",
            }],
            "variables": [
                {"name": "boundNode",
                 "expression": f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                               f"size(request.userInfo.extra['{NODE_NAME_EXTRA}']) > 0 ? {node} : ''"},
            ],
            "validations": [
                {"expression": "variables.boundNode != ''", "reason": "Forbidden",
                 "message": "the detector's token is not bound to a node; it may write nothing"},
                {"expression": "request.resource.resource != 'nodes' || request.name == variables.boundNode",
                 "reason": "Forbidden", "messageExpression":
                     "'the detector of node ' + variables.boundNode + ' may not write node ' + request.name"},
                {"expression": "request.resource.resource != 'nodes' || request.subResource == 'status'",
                 "reason": "Forbidden", "message": "the detector writes only the node's status"},
                {"expression": "request.resource.resource != 'nodes' || object == null || oldObject == null || "
                               "((has(object.metadata.labels) ? object.metadata.labels : {}) == "
                               "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}))",
                 "reason": "Forbidden", "message": "the detector may not change node labels"},
                {"expression": "request.resource.resource != 'nodes' || object == null || oldObject == null || "
                               "!has(oldObject.status.conditions) || (has(object.status.conditions) && "
                               + others.format("object") + " == " + others.format("oldObject") + ")",
                 "reason": "Forbidden",
                 "message": f"the detector may change only its own conditions {own}"},
                {"expression": "request.resource.resource != 'events' || object == null || "
                               "object.involvedObject.name == variables.boundNode",
                 "reason": "Forbidden", "message": "the detector may record events only about its own node"},
            ],
        },
    }


def node_self_write_policy_binding(name: str = "autoclusters-detector-own-node") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def detector_rbac(names: Names, namespace: str = DEFAULT_NAMESPACE,
                  service_account: str = DETECTOR_SERVICE_ACCOUNT, *, local: bool = False) -> list[dict[str, Any]]:
    """Service account, ClusterRole + binding, and the own-node admission policy + binding;
    ``local``: a local (kwok) cluster, whose simulated fleet lists and watches nodes."""
    sfx = _suffix(namespace)
    role = f"autoclusters-detector{sfx}"
    policy = f"autoclusters-detector-own-node{sfx}"
    return [
        detector_service_account(namespace, service_account),
        detector_cluster_role(role, simulated_fleet=local),
        detector_cluster_role_binding(namespace, role, service_account),
        node_self_write_policy(names, namespace, service_account, policy),
        node_self_write_policy_binding(policy),
    ]
