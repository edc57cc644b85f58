"""Admission objects: the CEL floor (ValidatingAdmissionPolicy + binding), the webhook
configuration, and the webhook's RBAC, all generated from ``Names``.

Two layers enforce the maintenance-label contract (docs/contract.md, "Admission rules"):

- The ValidatingAdmissionPolicy runs inside the API server, needs no network hop and
  holds when the webhook is down. It exempts the controller identities with a
  ``matchCondition``, so it can never stall a repair.
- The webhook asks OPA (the Rego in ``policies/``) and adds decision logs and the pool
  checks. Its ``matchConditions`` pass only writes that touch the two maintenance labels,
  so kubelet traffic never reaches it.

The rule ids in the CEL messages are the Rego rule ids, so a denial reads the same
whichever layer gave it.
"""

from __future__ import annotations

import base64
from typing import Any

from autoclusters import api
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import STACK_SETTING as ALLOW_LISTS_SETTING
from autoclusters.allow_lists import AllowLists
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE, WEBHOOK_SERVICE_ACCOUNT
from autoclusters.deploy.detector import detector_username
from autoclusters.names import Names

ADMISSION_V1 = "admissionregistration.k8s.io/v1"
RBAC_V1 = "rbac.authorization.k8s.io/v1"
POLICY_NAME = "autoclusters-maintenance-labels"
WEBHOOK_CONFIG_NAME = "autoclusters-webhook"
WEBHOOK_PATH = "/validate"
# Every write path of a Node's labels: the object itself, and its status subresource, whose
# update strategy keeps the spec but takes the metadata as sent, labels included (the kubelet
# writes its default labels that way). Operations on the status path are UPDATE only (it has no
# create). Both admission layers match exactly these.
NODE_RESOURCES = ("nodes", "nodes/status")
NODE_OPERATIONS = ("CREATE", "UPDATE")
# How long the API server waits for the webhook (the configuration's ``timeoutSeconds``), and
# how long the webhook waits for OPA: below it, so a hung OPA gets the webhook's own denial,
# which says the policy engine did not answer, instead of the API server's time-out.
WEBHOOK_TIMEOUT_SECONDS = 3
OPA_TIMEOUT_SECONDS = 1.0
# A label value can never contain '<', so this stands for "label absent" in CEL comparisons.
ABSENT = "<absent>"
_PART_OF = {"app.kubernetes.io/part-of": "autoclusters"}


def default_controllers(namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    return [f"system:serviceaccount:{namespace}:{CONTROLLER_SERVICE_ACCOUNT}"]


# A node's own identities, which may not touch either maintenance label: every kubelet's group
# (the API server's Node authorizer and NodeRestriction know kubelets by it) and the node agents
# (the detector's service account, whose node-bound tokens every GPU node holds).
NODE_GROUPS = ("system:nodes",)


def default_node_agents(namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    return [detector_username(namespace)]


def policy_config(names: Names, controllers: list[str] | None = None, node_agents: list[str] | None = None,
                  allow_lists: AllowLists = NO_ENTRIES) -> dict[str, Any]:
    """The value of ``data.autoclusters.config``: the names the Rego rules depend on (its keys
    override the defaults in ``policies/lib/config.rego``, which a unit test holds equal to
    this function's defaults), and the operator's allow-lists the pool rules check against."""
    return {"domain": names.domain, "controllers": list(controllers or default_controllers()),
            "nodeGroups": list(NODE_GROUPS), "nodeAgents": list(node_agents or default_node_agents()),
            ALLOW_LISTS_SETTING: allow_lists.to_config()}


def policy_data_document(names: Names, controllers: list[str] | None = None, node_agents: list[str] | None = None,
                         allow_lists: AllowLists = NO_ENTRIES) -> dict[str, Any]:
    """:func:`policy_config` as a data document loaded at OPA's root (``opa run``/``opa eval``
    with a ``.json`` file among its paths, the webhook sidecar's ConfigMap)."""
    return {"autoclusters": {"config": policy_config(names, controllers, node_agents, allow_lists)}}


def _cel_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def label_value_cel(obj: str, key: str) -> str:
    """CEL for the value of label ``key`` on ``obj`` (object/oldObject), or ABSENT.

    ``oldObject`` is null on CREATE; CEL's ``&&`` absorbs the errors of the later terms.
    """
    k = _cel_str(key)
    return (f"({obj} != null && has({obj}.metadata.labels) && {k} in {obj}.metadata.labels"
            f" ? {obj}.metadata.labels[{k}] : {_cel_str(ABSENT)})")


def touches_maintenance_labels_cel(names: Names) -> str:
    """True when a write adds, changes or removes either maintenance label."""
    return " || ".join(f"{label_value_cel('oldObject', k)} != {label_value_cel('object', k)}"
                       for k in (names.maintenance_required, names.maintenance_approved))


def not_controller_cel(controllers: list[str]) -> str:
    return f"!(request.userInfo.username in [{', '.join(_cel_str(c) for c in controllers)}])"


def node_identity_cel(node_agents: list[str]) -> str:
    """True when the request comes from a node's own identity (``NODE_GROUPS``, ``node_agents``)."""
    groups = ", ".join(_cel_str(g) for g in NODE_GROUPS)
    agents = ", ".join(_cel_str(a) for a in node_agents)
    return (f"(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [{groups}]))"
            f" || request.userInfo.username in [{agents}]")


def _verb_cel(old: str, new: str) -> str:
    absent = _cel_str(ABSENT)
    return f"({old} == {absent} ? 'add' : ({new} == {absent} ? 'remove' : 'change'))"


def validating_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of the system; it fails closed (``failurePolicy: Fail``)."""
    return {"apiVersion": ADMISSION_V1, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(_PART_OF)}, "spec": {"failurePolicy": "Fail", **spec}}


def admission_policy(names: Names, controllers: list[str] | None = None, *, name: str = POLICY_NAME,
                     node_agents: list[str] | None = None) -> dict[str, Any]:
    """The CEL floor: the four node-label rules, for every identity but the controller. The
    validations run in order and the first that fails is the one reported."""
    controllers = controllers or default_controllers()
    req, appr = names.maintenance_required, names.maintenance_approved
    absent = _cel_str(ABSENT)
    return validating_policy(name, {
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": list(NODE_OPERATIONS),
                                   "resources": list(NODE_RESOURCES)}],
            },
            "matchConditions": [
                {"name": "not-the-controller", "expression": not_controller_cel(controllers)},
                {"name": "touches-maintenance-labels", "expression": touches_maintenance_labels_cel(names)},
            ],
            "variables": [
                {"name": "oldRequired", "expression": label_value_cel("oldObject", req)},
                {"name": "newRequired", "expression": label_value_cel("object", req)},
                {"name": "oldApproved", "expression": label_value_cel("oldObject", appr)},
                {"name": "newApproved", "expression": label_value_cel("object", appr)},
                {"name": "nodeIdentity", "expression": node_identity_cel(node_agents or default_node_agents())},
            ],
            "validations": [
                {
                    "expression": "variables.oldRequired == variables.newRequired",
                    "reason": "Forbidden",
                    "messageExpression": (
                        f"'[maintenance-required-controller-only] {req} is set and removed by the autoclusters "
                        "controller only; ' + request.userInfo.username + ' may not ' + "
                        f"{_verb_cel('variables.oldRequired', 'variables.newRequired')} + ' it'"),
                },
                {
                    "expression": (f"variables.newApproved == {absent} || variables.newApproved == "
                                   "variables.oldApproved || variables.newApproved == 'true'"),
                    "reason": "Invalid",
                    "messageExpression": (
                        f"'[maintenance-approved-value] {appr} may only be set to \"true\" (got \"' + "
                        "variables.newApproved + '\"); remove the label to withdraw an approval'"),
                },
                {
                    "expression": (f"variables.newApproved == {absent} || variables.newApproved == "
                                   f"variables.oldApproved || variables.newRequired != {absent}"),
                    "reason": "Invalid",
                    "message": (f"[maintenance-approved-requires-fault] the node no longer needs a repair: {req} "
                                f"is not present, so there is nothing to approve ({appr} is accepted only while "
                                f"{req} is on the node)"),
                },
                {
                    "expression": "variables.newApproved == variables.oldApproved || !variables.nodeIdentity",
                    "reason": "Forbidden",
                    "messageExpression": (
                        _cel_str(f"[maintenance-approved-not-by-nodes] {appr} is a person's approval of a repair; ")
                        + " + request.userInfo.username + " + _cel_str(", a node's own identity, may not ")
                        + f" + {_verb_cel('variables.oldApproved', 'variables.newApproved')} + ' it'"),
                },
            ],
    })


def admission_policy_binding(*, policy_name: str = POLICY_NAME, name: str | None = None,
                             node_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """Binds the policy with ``Deny``. ``node_selector`` (a label selector) narrows it to some
    nodes, which is how tests scope it to the nodes they create."""
    spec: dict[str, Any] = {"policyName": policy_name, "validationActions": ["Deny"]}
    if node_selector is not None:
        spec["matchResources"] = {"objectSelector": node_selector}
    return {
        "apiVersion": ADMISSION_V1,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name or policy_name, "labels": dict(_PART_OF)},
        "spec": spec,
    }


def webhook_names(names: Names) -> tuple[str, str]:
    """The two webhooks of the configuration: the node labels' and the pools'. The API server's
    admission metrics carry them as ``name`` (the webhook alerts select them so)."""
    return f"maintenance-labels.{names.api_group}", f"{api.POOLS.plural}.{names.api_group}"


def webhook_configuration(names: Names, *, ca_bundle: bytes, url: str | None = None,
                          namespace: str = DEFAULT_NAMESPACE, service: str = "autoclusters-webhook",
                          name: str = WEBHOOK_CONFIG_NAME, node_selector: dict[str, Any] | None = None,
                          timeout_seconds: int = WEBHOOK_TIMEOUT_SECONDS, include_pools: bool = True,
                          controllers: list[str] | None = None) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration. ``url`` (e.g. ``https://127.0.0.1:8443/validate``)
    is for a webhook running on the API server's host (the local cluster); otherwise the
    in-cluster Service is used. ``ca_bundle`` is the PEM of the CA(s) that sign the serving
    certificate.

    The controller identities are exempt here as in the CEL floor: with ``failurePolicy:
    Fail`` a webhook outage then blocks users' label writes (fail closed) but never the
    controller's repairs."""
    # An empty bundle is left out: whoever writes it (the controller's leader, cert-manager's
    # cainjector) then owns the field alone, and a server-side apply of this configuration
    # (helm upgrade, Pulumi) neither conflicts with that writer nor resets the bundle to "".
    client: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()} if ca_bundle else {}
    if url:
        client["url"] = url
    else:
        client["service"] = {"namespace": namespace, "name": service, "path": WEBHOOK_PATH, "port": 443}
    common = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": timeout_seconds,
    }
    node_name, pools_name = webhook_names(names)
    node_hook: dict[str, Any] = {
        "name": node_name,
        **common,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": list(NODE_OPERATIONS),
                   "resources": list(NODE_RESOURCES), "scope": "Cluster"}],
        "matchConditions": [
            {"name": "not-the-controller",
             "expression": not_controller_cel(controllers or default_controllers(namespace))},
            {"name": "touches-maintenance-labels", "expression": touches_maintenance_labels_cel(names)},
        ],
    }
    if node_selector is not None:
        node_hook["objectSelector"] = node_selector
    hooks = [node_hook]
    if include_pools:
        hooks.append({
            "name": pools_name,
            **common,
            "rules": [{"apiGroups": [names.api_group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                       "resources": [api.POOLS.plural], "scope": "Cluster"}],
        })
    return {
        "apiVersion": ADMISSION_V1,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": dict(_PART_OF)},
        "webhooks": hooks,
    }


def ca_bundle_patch(config: dict[str, Any], ca_bundle: bytes) -> list[dict[str, Any]]:
    """A JSON patch that writes ``ca_bundle`` into every webhook of ``config`` (CA rotation)."""
    b64 = base64.b64encode(ca_bundle).decode()
    return [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": b64}
            for i in range(len(config.get("webhooks") or []))]


def webhook_rbac(namespace: str = DEFAULT_NAMESPACE, *,
                 service_account: str = WEBHOOK_SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    """The webhook's identity, with no API rights and no token: the AdmissionReview carries
    both objects, OPA is on loopback, and its serving certificate is a mounted Secret that
    someone else renews (the controller, ``controller/webhook_certs.py``, or cert-manager)."""
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
             "metadata": {"name": service_account, "namespace": namespace, "labels": dict(_PART_OF)}}]


def admission_objects(names: Names, *, ca_bundle: bytes, namespace: str = DEFAULT_NAMESPACE,
                      controllers: list[str] | None = None) -> list[dict[str, Any]]:
    """Everything admission installs on a cluster (the webhook's Deployment and Service are
    in ``deploy.workloads``)."""
    return [
        admission_policy(names, controllers or default_controllers(namespace),
                         node_agents=default_node_agents(namespace)),
        admission_policy_binding(),
        webhook_configuration(names, ca_bundle=ca_bundle, namespace=namespace, controllers=controllers),
        *webhook_rbac(namespace),
    ]
