"""RBAC of the remediation controller: exactly the verbs its code paths use
(``tests/unit/test_rbac_calls.py`` runs them and holds the two equal).

Cluster-wide: nodes (labels, taint, cordon), pods (list, evict, delete after the drain
deadline, patch for the warning's annotations), events (on nodes, pools and the warned
pods), our two custom resources and their two CRDs (the storage migration, by name).
Namespaced: the leader-election Lease, in the controller's own namespace only. On top, what
each repair provider the installation grants needs (``Rule`` entries of
``deploy.providers.KINDS``: node create/delete for the simulated one, only on a local
cluster; Machines for Cluster API, Jobs in the controller's namespace for host reboot,
``get`` of its one Secret there for Redfish), merged per resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autoclusters import api
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE, cluster_scoped_name
from autoclusters.deploy.patch_limits import controller_pod_patch_policy, policy_binding
from autoclusters.deploy.providers import KINDS
from autoclusters.deploy.workloads import WEBHOOK_CA_SECRET, WEBHOOK_TLS_SECRET, cluster_role_binding
from autoclusters.names import Names

LEASE_NAME = "autoclusters-controller"


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _with_providers(rules: list[dict[str, Any]], *, namespaced: bool,
                    providers: Iterable[str] | None) -> list[dict[str, Any]]:
    """``rules`` plus the rules of that scope of each of ``providers``; verbs of one resource
    (and the same ``resourceNames``) merged, in order."""
    out = [dict(r, verbs=list(r["verbs"])) for r in rules]
    for kind in (KINDS[t] for t in (tuple(KINDS) if providers is None else providers)):
        for need in kind.rbac:
            if need.namespaced != namespaced:
                continue
            named = list(need.names)
            same = next((r for r in out if r["apiGroups"] == [need.group] and r["resources"] == [need.resource]
                         and r.get("resourceNames", []) == named), None)
            if same is None:
                rule = _rule([need.group], [need.resource], list(need.verbs))
                out.append({**rule, "resourceNames": named} if named else rule)
            else:
                same["verbs"] += [v for v in need.verbs if v not in same["verbs"]]
    return out


def webhook_certificate_rules(config_name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What keeping the webhook's certificate takes (controller/webhook_certs.py): the caBundle
    of its own configuration (cluster-wide, by name), and its two Secrets in the controller's
    namespace (by name; ``create`` cannot be limited to names, RBAC knows none before it exists)."""
    return ({**_rule(["admissionregistration.k8s.io"], ["validatingwebhookconfigurations"], ["get", "patch"]),
             "resourceNames": [config_name]},
            [{**_rule([""], ["secrets"], ["get", "patch"]), "resourceNames": [WEBHOOK_TLS_SECRET, WEBHOOK_CA_SECRET]},
             _rule([""], ["secrets"], ["create"])])


def controller_cluster_role(names: Names, name: str = "autoclusters-controller",
                            webhook_config: str | None = None,
                            providers: Iterable[str] | None = None) -> dict[str, Any]:
    g = names.api_group
    certs = [webhook_certificate_rules(webhook_config)[0]] if webhook_config else []
    crd_names = [names.crd_name(r) for r in (api.POOLS, api.REMEDIATIONS)]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "rules": _with_providers([
            _rule([""], ["nodes"], ["get", "list", "watch", "patch"]),
            # pods: listed per node for the drain, annotated with the warning, deleted at the deadline
            _rule([""], ["pods"], ["list", "patch", "delete"]),
            _rule([""], ["pods/eviction"], ["create"]),
            _rule([""], ["events"], ["create", "patch"]),
            # the custom resources through informers: listed and watched, never read one by one;
            # update: the storage migration writes each object back as read (controller/storage_migration.py)
            _rule([g], [api.POOLS.plural], ["list", "watch", "update"]),
            _rule([g], [f"{api.POOLS.plural}/status"], ["patch"]),
            _rule([g], [api.REMEDIATIONS.plural], ["list", "watch", "create", "delete", "update"]),
            _rule([g], [f"{api.REMEDIATIONS.plural}/status"], ["patch"]),
            # and then trims the storedVersions of our two CRDs, by name
            {**_rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get"]), "resourceNames": crd_names},
            {**_rule(["apiextensions.k8s.io"], ["customresourcedefinitions/status"], ["patch"]),
             "resourceNames": crd_names},
        ], namespaced=False, providers=providers) + certs,
    }


def controller_cluster_role_binding(namespace: str = DEFAULT_NAMESPACE, name: str = "autoclusters-controller",
                                    service_account: str = CONTROLLER_SERVICE_ACCOUNT) -> dict[str, Any]:
    return cluster_role_binding(name, service_account, namespace)


def controller_lease_role(namespace: str = DEFAULT_NAMESPACE, name: str = "autoclusters-controller-leader",
                          webhook_config: str | None = None,
                          providers: Iterable[str] | None = None) -> dict[str, Any]:
    certs = webhook_certificate_rules(webhook_config)[1] if webhook_config else []
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "rules": _with_providers([_rule(["coordination.k8s.io"], ["leases"], ["get", "list", "create", "update"]),
                                  # the cluster default policy's ConfigMap (pools.default_pool)
                                  _rule([""], ["configmaps"], ["list", "watch"]),
                                  # its own pod, for its image (controller/own_image.py)
                                  _rule([""], ["pods"], ["get"])],
                                 namespaced=True, providers=providers) + certs,
    }


def controller_lease_role_binding(namespace: str = DEFAULT_NAMESPACE, name: str = "autoclusters-controller-leader",
                                  service_account: str = CONTROLLER_SERVICE_ACCOUNT) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def controller_rbac(names: Names, namespace: str = DEFAULT_NAMESPACE,
                    service_account: str = CONTROLLER_SERVICE_ACCOUNT, *,
                    webhook_config: str | None = None,
                    providers: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """ClusterRole + binding and the namespaced Lease role + binding, for one service account,
    with the rights of ``providers`` (``deploy.providers.granted_providers``: the stack's);
    with ``webhook_config``, the rights to keep the webhook's certificate; and the admission
    policy that holds its pod patches to the warning's annotations (``deploy.patch_limits``)."""
    cr = "autoclusters-controller" if namespace == DEFAULT_NAMESPACE else f"autoclusters-controller-{namespace}"
    pod_policy = cluster_scoped_name("autoclusters-controller-pod-patches", namespace)
    return [
        controller_cluster_role(names, cr, webhook_config, providers),
        controller_cluster_role_binding(namespace, cr, service_account),
        controller_lease_role(namespace, webhook_config=webhook_config, providers=providers),
        controller_lease_role_binding(namespace, service_account=service_account),
        controller_pod_patch_policy(names, namespace, pod_policy, service_account),
        policy_binding(pod_policy),
    ]
