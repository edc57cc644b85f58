"""Who may write pools: aggregated ClusterRoles and the policy that holds a pool editor to the
consent mode and the limits.

- ``autoclusters-pool-viewer`` (aggregated into ``view``, so into ``edit`` and ``admin``):
  read pools and repair records.
- ``autoclusters-pool-editor`` (aggregated into ``edit``, so into ``admin``): ``update`` and
  ``patch`` of pools, held by the policy below to the keys of ``pool_fields.EDITOR_KEYS``
  (the consent mode and the limits: concurrency, breaker, drain deadlines, escalation, attempt
  budget). It cannot create or delete a pool, nor change its provider, its hook (an
  allow-list reference), its selector, its repair choices or its Slurm settings.
- ``autoclusters-pool-author`` (aggregated nowhere: bound by the operator): everything on
  pools, and the custom verb ``author`` on ``gpunodepools`` that the policy asks the API
  server's authorizer about. Whoever holds ``*`` verbs (``cluster-admin``, a GitOps
  controller bound to it, the stack's deployer) holds ``author`` too and is not held.

The policy keys on the request's own authorization (the ``authorizer`` variable of a
ValidatingAdmissionPolicy: kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/,
"Authorization check"), not on a group name, so every way a user gets the editor's verbs
(the aggregated ``edit``, a direct binding) is held alike.
"""

from __future__ import annotations

from typing import Any

from autoclusters import api, pool_fields
from autoclusters.deploy import DEFAULT_NAMESPACE, cluster_scoped_name
from autoclusters.deploy.admission import _cel_str, admission_policy_binding, validating_policy
from autoclusters.names import Names

AUTHOR_VERB = "author"  # a custom verb: RBAC grants it, only this policy asks for it
VIEWER, EDITOR, AUTHOR = "autoclusters-pool-viewer", "autoclusters-pool-editor", "autoclusters-pool-author"
EDITOR_POLICY = "autoclusters-pool-editors"
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _role(name: str, aggregate_to: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/part-of": "autoclusters",
              **({_AGGREGATE + aggregate_to: "true"} if aggregate_to else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels}, "rules": rules}


def pool_roles(names: Names, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """The viewer, editor and author ClusterRoles, the editor's policy and its binding."""
    group, pools, records = names.api_group, api.POOLS.plural, api.REMEDIATIONS.plural
    read = ["get", "list", "watch"]
    policy = cluster_scoped_name(EDITOR_POLICY, namespace)
    return [
        _role(cluster_scoped_name(VIEWER, namespace), "view",
              [{"apiGroups": [group], "resources": [pools, f"{pools}/status", records], "verbs": read}]),
        _role(cluster_scoped_name(EDITOR, namespace), "edit",
              [{"apiGroups": [group], "resources": [pools], "verbs": [*read, "update", "patch"]}]),
        _role(cluster_scoped_name(AUTHOR, namespace), "",
              [{"apiGroups": [group], "resources": [pools],
                "verbs": [*read, "create", "update", "patch", "delete", AUTHOR_VERB]}]),
        editor_policy(names, policy),
        admission_policy_binding(policy_name=policy),
    ]


def editor_policy(names: Names, name: str = EDITOR_POLICY) -> dict[str, Any]:
    """Updates of a pool by anyone not authorized to ``author`` pools change only the keys of
    ``pool_fields.EDITOR_KEYS`` of its spec, and neither its labels nor its annotations."""
    keys = "[" + ", ".join(_cel_str(k) for k in pool_fields.EDITOR_KEYS) + "]"
    author = (f"authorizer.group({_cel_str(names.api_group)}).resource({_cel_str(api.POOLS.plural)})"
              f".check({_cel_str(AUTHOR_VERB)}).allowed()")
    spec, old = "(has(object.spec) ? object.spec : {})", "(has(oldObject.spec) ? oldObject.spec : {})"
    meta = " && ".join(f"(has(object.metadata.{f}) ? object.metadata.{f} : {{}}) == "
                       f"(has(oldObject.metadata.{f}) ? oldObject.metadata.{f} : {{}})"
                       for f in ("labels", "annotations"))
    return validating_policy(name, {
        "matchConstraints": {"resourceRules": [{"apiGroups": [names.api_group], "apiVersions": ["*"],
                                                "operations": ["UPDATE"], "resources": [api.POOLS.plural]}]},
        "matchConditions": [{"name": "not-a-pool-author", "expression": f"!{author}"}],
        "variables": [{"name": "editable", "expression": keys},
                      {"name": "spec", "expression": spec}, {"name": "old", "expression": old}],
        "validations": [{
            "expression": ("variables.spec.all(k, k in variables.editable || "
                           "(k in variables.old && variables.old[k] == variables.spec[k])) && "
                           "variables.old.all(k, k in variables.editable || k in variables.spec) && " + meta),
            "reason": "Forbidden",
            "messageExpression": (
                f"'a pool editor may change only ' + variables.editable.join(', ') + ' of a pool; the other "
                f"fields (provider, preDrain, selector, repair choices, slurm) and its labels take the verb "
                f"{AUTHOR_VERB} on {api.POOLS.plural} (the ClusterRole {AUTHOR})'"),
        }],
    })
