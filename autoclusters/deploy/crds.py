"""The two CustomResourceDefinitions: ``GpuNodePool`` (policy) and ``Remediation`` (history).

The schemas validate at the API server (enums, ranges, unknown fields pruned), so a bad
pool object is rejected with a message that names the field instead of being read by a
controller that would guess. Printer columns make ``kubectl get gnp`` / ``kubectl get rem``
show the fields an operator looks for first.
"""

from __future__ import annotations

from typing import Any

from autoclusters.deploy import API_VERSION
from autoclusters.deploy.pool_config import ACKNOWLEDGER_PATTERN, PreDrain, PreDrainHook
from autoclusters.deploy.pool_slurm import slurm_schema
from autoclusters.deploy.providers import provider_schema
from autoclusters.names import Names

FAULT_CLASSES = ("gpu", "nvswitch", "dcgm", "interconnect")
PHASES = ("AwaitingApproval", "Scheduled", "Draining", "Acting", "Verifying", "Succeeded", "NotNeeded", "Failed",
          "HumanNeeded", "Closed")


def _int(minimum: int, default: int | None = None, maximum: int | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if default is not None:
        s["default"] = default
    if maximum is not None:
        s["maximum"] = maximum
    return s


def _obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


_SELECTOR = _obj({
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array", "items": _obj({
        "key": {"type": "string"},
        "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
        "values": {"type": "array", "items": {"type": "string"}},
    }, required=["key", "operator"])},
}, description="Nodes of the pool (see docs/operations.md for the membership rule); default: nodes whose "
               "pool label equals the pool's name.",
    **{"x-kubernetes-validations": [{
        "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
        "message": "nodeSelector needs matchLabels or matchExpressions (an empty selector would select every "
                   "node); leave nodeSelector out to use the pool label"}]})


def pool_schema() -> dict[str, Any]:
    spec = _obj({
        "consentMode": {"type": "string", "enum": ["auto", "propose", "off"], "default": "auto",
                        "description": "auto: repair at once; propose: wait for the approval label; off: report only."},
        "nodeSelector": _SELECTOR,
        "faultClasses": _obj({c: {"type": "string", "enum": ["default", "reset", "replace", "off"],
                                  "default": "default"} for c in FAULT_CLASSES},
                             description="Per fault class action; default = the catalog's action for the code."),
        "maxConcurrentRepairs": _int(1, 1),
        "circuitBreaker": _obj({
            "openAbovePercent": _int(1, 30, 100),
            "closeBelowPercent": _int(1, 20, 100),
            "minNodes": _int(0, 0),
        }, default={}, **{"x-kubernetes-validations": [{
            "rule": "!has(self.closeBelowPercent) || !has(self.openAbovePercent) || "
                    "self.closeBelowPercent <= self.openAbovePercent",
            "message": "closeBelowPercent must not exceed openAbovePercent"}]}),
        "drain": _obj({"resetDeadlineSeconds": _int(1, 300), "replaceDeadlineSeconds": _int(1, 600)}, default={}),
        "escalation": _obj({"refaultWindowSeconds": _int(1, 900), "resetMemorySeconds": _int(1, 86400)},
                           default={}),
        "attemptBudget": _obj({"maxRepairs": _int(1, 3), "windowSeconds": _int(1, 604800)}, default={}),
        "preDrain": _obj({
            "waitSeconds": {**_int(0, PreDrain.wait_seconds), "description": (
                "Longest wait after the warning (node and pod annotations, events, hook) before eviction "
                "starts; ends early when every acknowledger and every pod labelled drain-wait=true acked.")},
            "acknowledgers": {"type": "array", "default": [], "items": {
                "type": "string", "pattern": ACKNOWLEDGER_PATTERN},
                "description": "Node-level preparers (e.g. slurm) that ack with the node annotation "
                               "<domain>/drain-ack-<name> = the Remediation's name.",
                **{"x-kubernetes-list-type": "set"}},
            "slinky": {"type": "boolean", "default": PreDrain.slinky,
                       "description": "Write nodeset.slinky.slurm.net/node-cordon-reason before cordoning."},
            "hook": _obj({
                "url": {"type": "string", "pattern": "^https?://\\S+$"},
                "command": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "timeoutSeconds": _int(1, PreDrainHook.timeout_seconds),
            }, description="Called once with node, fault, record and deadline (HTTP POST or a command).",
                **{"x-kubernetes-validations": [{
                    "rule": "has(self.url) != has(self.command)",
                    "message": "preDrain.hook needs exactly one of url or command"}]}),
        }, default={}),
        "provider": provider_schema(),
        "slurm": slurm_schema(),
    }, default={})
    status = _obj({
        "nodes": {"type": "integer"},
        "faultyNodes": {"type": "integer"},
        "faultyPercent": {"type": "integer"},
        "repairsInProgress": {"type": "integer"},
        "circuitBreaker": _obj({"state": {"type": "string", "enum": ["Closed", "Open"]},
                                "since": {"type": "string", "format": "date-time"},
                                "message": {"type": "string"}}),
        "observedGeneration": {"type": "integer"},
        "providers": {"type": "string", "description": "Which provider carries out each action."},
        "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                       "items": _obj({
                           "type": {"type": "string"},
                           "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                           "reason": {"type": "string"},
                           "message": {"type": "string"},
                           "lastTransitionTime": {"type": "string", "format": "date-time"},
                           "observedGeneration": {"type": "integer"},
                       }, required=["type", "status"])},
    })
    return _obj({"spec": spec, "status": status})


def remediation_schema() -> dict[str, Any]:
    fault = _obj({"class": {"type": "string", "enum": list(FAULT_CLASSES)}, "code": {"type": "string"},
                  "reason": {"type": "string"}, "message": {"type": "string"}})
    spec = _obj({
        "node": {"type": "string"},
        "pool": {"type": "string"},
        "consentMode": {"type": "string", "enum": ["auto", "propose", "off"]},
        "action": {"type": "string", "enum": ["reset", "replace"]},
        "fault": fault,
    }, required=["node", "pool", "fault"])
    status = _obj({
        "phase": {"type": "string", "enum": list(PHASES)},
        "action": {"type": "string", "enum": ["reset", "replace"]},
        "approved": {"type": "boolean"},
        "escalated": {"type": "boolean"},
        "escalatedFrom": {"type": "string"},
        "optOut": {"type": "boolean"},
        "attempts": {"type": "integer"},
        "nodeWasCordoned": {"type": "boolean"},
        "drainStarted": {"type": "string", "format": "date-time"},
        "preDrainDeadline": {"type": "string", "format": "date-time"},
        "evictionStarted": {"type": "string", "format": "date-time"},
        "operation": _obj({"id": {"type": "string"}, "action": {"type": "string"},
                           "started": {"type": "string", "format": "date-time"},
                           "bootIdBefore": {"type": "string"}, "newNode": {"type": "string"}}),
        "verifyStarted": {"type": "string", "format": "date-time"},
        "hold": {"type": "string"},
        "outcome": {"type": "string"},
        "message": {"type": "string"},
        "replacementNode": {"type": "string"},
        "created": {"type": "string", "format": "date-time"},
        "completed": {"type": "string", "format": "date-time"},
        "steps": {"type": "array", "items": _obj({"phase": {"type": "string"},
                                                  "time": {"type": "string", "format": "date-time"},
                                                  "message": {"type": "string"}})},
    })
    return _obj({"spec": spec, "status": status})


def _crd(names: Names, kind: str, plural: str, short: str, schema: dict[str, Any],
         columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{names.api_group}", "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "spec": {
            "group": names.api_group,
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "shortNames": [short],
                      "listKind": f"{kind}List", "categories": ["autoclusters"]},
            "versions": [{
                "name": API_VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
            }],
        },
    }


def gpu_node_pool_crd(names: Names) -> dict[str, Any]:
    return _crd(names, "GpuNodePool", "gpunodepools", "gnp", pool_schema(), [
        {"name": "Mode", "type": "string", "jsonPath": ".spec.consentMode"},
        {"name": "Max-Repairs", "type": "integer", "jsonPath": ".spec.maxConcurrentRepairs"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Faulty", "type": "integer", "jsonPath": ".status.faultyNodes"},
        {"name": "Repairing", "type": "integer", "jsonPath": ".status.repairsInProgress"},
        {"name": "Breaker", "type": "string", "jsonPath": ".status.circuitBreaker.state"},
        {"name": "Providers", "type": "string", "jsonPath": ".status.providers", "priority": 1},
        {"name": "Slurm", "type": "boolean", "jsonPath": ".spec.slurm.enabled", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])


def remediation_crd(names: Names) -> dict[str, Any]:
    return _crd(names, "Remediation", "remediations", "rem", remediation_schema(), [
        {"name": "Node", "type": "string", "jsonPath": ".spec.node"},
        {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
        {"name": "Fault", "type": "string", "jsonPath": ".spec.fault.reason"},
        {"name": "Code", "type": "string", "jsonPath": ".spec.fault.code"},
        {"name": "Action", "type": "string", "jsonPath": ".status.action"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Outcome", "type": "string", "jsonPath": ".status.outcome"},
        {"name": "Replacement", "type": "string", "jsonPath": ".status.replacementNode", "priority": 1},
        {"name": "Mode", "type": "string", "jsonPath": ".spec.consentMode", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])


def crds(names: Names) -> list[dict[str, Any]]:
    return [gpu_node_pool_crd(names), remediation_crd(names)]
