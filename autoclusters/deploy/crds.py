"""The two CustomResourceDefinitions: ``GpuNodePool`` (policy) and ``Remediation`` (history).

The schemas validate at the API server (enums, ranges, unknown fields pruned), so a bad
pool object is rejected with a message that names the field instead of being read by a
controller that would guess. Printer columns make ``kubectl get gnp`` / ``kubectl get rem``
show the fields an operator looks for first.
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any

from autoclusters import api, pool_fields
from autoclusters.api import BreakerState, ClassAction, ConsentMode, FaultClass, Phase
from autoclusters.deploy.providers import provider_schema
from autoclusters.deploy.workloads import HELM_KEEP
from autoclusters.names import Names
from autoclusters.pools.slurm_policy import slurm_schema
from autoclusters.providers.actions import ACTIONS as ACTION_TABLE


def _enum(kind: type[StrEnum], **extra: Any) -> dict[str, Any]:
    return {"type": "string", "enum": [m.value for m in kind], **extra}


def _actions() -> dict[str, Any]:
    """The repair actions (the action table, providers/actions.py: reset, replace and any registered since)."""
    return {"type": "string", "enum": list(ACTION_TABLE.names())}


def _settings(group: str) -> dict[str, Any]:
    """The settings of one object of the pool spec, from the pool's field table."""
    return {s.key: s.schema() for s in pool_fields.settings_of(group)}


def _rules(group: str, *own: dict[str, str]) -> dict[str, Any]:
    """The CEL rules of one object of the pool spec: its ``own`` and those of the field table."""
    rules = [*own, *(r.cel() for r in pool_fields.rules_of(group))]
    return {"x-kubernetes-validations": rules} if rules else {}


def _group(group: str, **extra: Any) -> dict[str, Any]:
    """An object of the pool spec that holds only settings of the table (absent: every default)."""
    return _obj(_settings(group), default={}, **_rules(group), **extra)


def _obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


_WITH_VALUES = ", ".join(f"'{o}'" for o in pool_fields.SELECTOR_OPERATORS_WITH_VALUES)
_SELECTOR = _obj({
    "matchLabels": {"type": "object", "maxProperties": pool_fields.SELECTOR_MAX_LABELS,
                    "additionalProperties": {"type": "string", "pattern": pool_fields.LABEL_VALUE_PATTERN},
                    "x-kubernetes-validations": [{
                        "rule": f"self.all(k, k.matches('{pool_fields.LABEL_KEY_PATTERN}'))",
                        "message": "matchLabels keys are label keys"}]},
    "matchExpressions": {"type": "array", "items": _obj({
        "key": {"type": "string", "pattern": pool_fields.LABEL_KEY_PATTERN},
        "operator": {"type": "string", "enum": list(pool_fields.SELECTOR_OPERATORS)},
        "values": {"type": "array", "items": {"type": "string", "pattern": pool_fields.LABEL_VALUE_PATTERN}},
    }, required=["key", "operator"], **{"x-kubernetes-validations": [{
        "rule": f"(self.operator in [{_WITH_VALUES}]) == (has(self.values) && size(self.values) > 0)",
        "message": "the operators " + ", ".join(pool_fields.SELECTOR_OPERATORS_WITH_VALUES) + " need values, "
                   "the others take none"}]})},
}, description="Nodes of the pool (see docs/operations.md for the membership rule); default: nodes whose "
               "pool label equals the pool's name.",
    **{"x-kubernetes-validations": [{
        "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
        "message": "nodeSelector needs matchLabels or matchExpressions (an empty selector would select every "
                   "node); leave nodeSelector out to use the pool label"}]})


def pool_schema() -> dict[str, Any]:
    spec = _obj({
        **_settings(""),
        "nodeSelector": _SELECTOR,
        "faultClasses": _obj({c.value: _enum(ClassAction, default=ClassAction.DEFAULT.value) for c in FaultClass},
                             description="Per fault class action for the codes that repair; default = the "
                                         "catalog's action for the code."),
        "repairCodes": {"type": "object", "default": {}, "additionalProperties": _actions(),
                        "description": "<class>:<code> -> reset | replace: repairs a code whose catalog action is "
                                       "none (an application or software Xid, an unknown code); the one opt-in.",
                        "x-kubernetes-validations": [{
                            "rule": f"self.all(k, k.matches('{api.REPAIR_CODE_PATTERN}'))",
                            "message": "repairCodes keys are <class>:<code>, e.g. gpu:13"}]},
        "circuitBreaker": _group("circuitBreaker"),
        "drain": _group("drain"),
        "escalation": _group("escalation"),
        "attemptBudget": _group("attemptBudget"),
        "preDrain": _obj({
            **_settings("preDrain"),
            "hook": _obj({
                "url": {"type": "string", "pattern": pool_fields.HOOK_URL_PATTERN},
                "command": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                **_settings("preDrain.hook"),
            }, description="Called once with node, fault, record and deadline (HTTP POST or a command).",
                **_rules("preDrain.hook", {"rule": "has(self.url) != has(self.command)",
                                           "message": "preDrain.hook needs exactly one of url or command"})),
        }, default={}, **_rules("preDrain")),
        "provider": provider_schema(),
        "slurm": slurm_schema(),
    }, default={}, **_rules(""))
    status = _obj({
        "nodes": {"type": "integer"},
        "faultyNodes": {"type": "integer"},
        "faultyPercent": {"type": "integer"},
        "repairsInProgress": {"type": "integer"},
        "circuitBreaker": _obj({"state": _enum(BreakerState),
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
    fault = _obj({"class": _enum(FaultClass), "code": {"type": "string"},
                  "reason": {"type": "string"}, "message": {"type": "string"}})
    spec = _obj({
        "node": {"type": "string"},
        "pool": {"type": "string"},
        "consentMode": _enum(ConsentMode),
        "action": _actions(),
        "fault": fault,
    }, required=["node", "pool", "fault"])
    status = _obj({
        "phase": _enum(Phase),
        "action": _actions(),
        "approved": {"type": "boolean"},
        "escalated": {"type": "boolean"},
        "escalatedFrom": {"type": "string"},
        "optOut": {"type": "boolean"},
        "attempts": {"type": "integer"},
        "nodeWasCordoned": {"type": "boolean"},
        "drainStarted": {"type": "string", "format": "date-time"},
        "preDrainDeadline": {"type": "string", "format": "date-time"},
        "warningAttempt": {"type": "integer"},
        "evictionStarted": {"type": "string", "format": "date-time"},
        "operation": _obj({"id": {"type": "string"}, "action": {"type": "string"},
                           "started": {"type": "string", "format": "date-time"},
                           "bootIdBefore": {"type": "string"}, "newNode": {"type": "string"},
                           "provider": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                        "description": "The provider (type and settings) the operation was "
                                                       "started with; it is driven by that one to its end."}}),
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


def _crd(names: Names, resource: api.Resource, schema: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": names.crd_name(resource),
                     "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "spec": {
            "group": names.api_group,
            "scope": "Cluster",
            "names": {"kind": resource.kind, "plural": resource.plural, "singular": resource.singular,
                      "shortNames": [resource.short_name], "listKind": resource.list_kind,
                      "categories": ["autoclusters"]},
            # Every served version from the one schema and columns: equal by construction, so the
            # API server converts between them by rewriting apiVersion (strategy None).
            "conversion": {"strategy": "None"},
            "versions": [_version(v, resource, schema, columns) for v in api.SERVED_VERSIONS],
        },
    }


def _version(name: str, resource: api.Resource, schema: dict[str, Any],
             columns: list[dict[str, Any]]) -> dict[str, Any]:
    """One version of a CRD: the storage version (``api.VERSION``) or an older one, still served
    and deprecated (the API server sends the warning to every client that uses it)."""
    version: dict[str, Any] = {
        "name": name, "served": True, "storage": name == api.VERSION,
        "schema": {"openAPIV3Schema": copy.deepcopy(schema)},
        "subresources": {"status": {}},
        "additionalPrinterColumns": copy.deepcopy(columns),
    }
    if name != api.VERSION:
        version["deprecated"] = True
        version["deprecationWarning"] = (f"{resource.kind} {name} is deprecated: use {api.VERSION} "
                                         "(the same schema; docs/deploy.md, \"Upgrading\")")
    return version


def gpu_node_pool_crd(names: Names) -> dict[str, Any]:
    return _crd(names, api.POOLS, pool_schema(), [
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
    return _crd(names, api.REMEDIATIONS, remediation_schema(), [
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
    """Both CRDs, annotated for Helm to keep them (and so every record) at ``helm uninstall``."""
    out = [gpu_node_pool_crd(names), remediation_crd(names)]
    for crd in out:
        crd["metadata"]["annotations"] = {**crd["metadata"].get("annotations", {}), **HELM_KEEP}
    return out
