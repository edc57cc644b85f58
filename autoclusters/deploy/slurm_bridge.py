"""The Slurm bridge's identity: a service account and exactly the verbs its code uses.

The bridge (``autoclusters slurm-bridge run``) runs where Slurm's client commands work, a
host or a pod with the cluster's munge key, not in the stack's namespace as a workload of
its own; what the stack gives it is the identity it talks to the API server with. Its code
reads pools, nodes and Remediation records through informers (list, watch; a drain
warning on a node counts only when its record backs it), patches nodes (its drain
acknowledgement, the cordon marker, the jobs it signalled) and writes events on them
(``kube/events.py``: create, then patch a repeat). It touches neither maintenance label, so
the admission rules let its patches through. The stack creates these objects when one of
its pools enables Slurm (``GpuNodePool.spec.slurm.enabled``); ``autoclusters slurm-bridge
rbac`` prints them for pools made another way.
"""

from __future__ import annotations

from typing import Any

from autoclusters import api
from autoclusters.deploy import DEFAULT_NAMESPACE, SLURM_BRIDGE_SERVICE_ACCOUNT, cluster_scoped_name
from autoclusters.deploy.patch_limits import policy_binding, slurm_bridge_node_patch_policy
from autoclusters.deploy.workloads import PART_OF, cluster_role_binding
from autoclusters.deploy.workloads import service_account as service_account_object
from autoclusters.names import Names

ROLE_NAME = "autoclusters-slurm-bridge"


def slurm_bridge_cluster_role(names: Names, name: str = ROLE_NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": PART_OF}},
        "rules": [
            # informers (list + watch; nothing is read one by one) and the bridge's merge patches
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": [names.api_group], "resources": [api.POOLS.plural], "verbs": ["list", "watch"]},
            # the records a drain warning on a node is checked against (slurm/bridge.py, ``warning``)
            {"apiGroups": [names.api_group], "resources": [api.REMEDIATIONS.plural], "verbs": ["list", "watch"]},
        ],
    }


def slurm_bridge_rbac(names: Names, namespace: str = DEFAULT_NAMESPACE,
                      service_account: str = SLURM_BRIDGE_SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    """Service account, ClusterRole and its binding, and the admission policy that holds its node
    patches to its own annotations and ``spec.unschedulable`` (``deploy.patch_limits``); the
    cluster-scoped names carry a second installation's namespace (``cluster_scoped_name``)."""
    role = cluster_scoped_name(ROLE_NAME, namespace)
    policy = cluster_scoped_name("autoclusters-slurm-bridge-node-patches", namespace)
    return [service_account_object(service_account, namespace), slurm_bridge_cluster_role(names, role),
            cluster_role_binding(role, service_account, namespace),
            slurm_bridge_node_patch_policy(names, namespace, policy, service_account), policy_binding(policy)]
