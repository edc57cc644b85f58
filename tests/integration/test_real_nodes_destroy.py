"""``pulumi destroy`` after a repair on the local cluster's real nodes leaves them unmarked
(issue 23, item 4): the stack of ``test_real_nodes_stack.py`` repairs a node through its pods,
then ``pulumi destroy --yes`` through the CLI. Its detector pods had written their conditions on
every real node, the repair its labels, taint, cordon and warning: none of it may remain, and
the nodes stay Ready and schedulable.

Run under ``flock /tmp/realnodes.lock`` (one cluster with real nodes per machine).
"""

from __future__ import annotations

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.realnodes import RealNode
from autoclusters.kube import NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.ops.uninstall import condition_types_ours, marks_of
from tests.integration.helpers import wait_for
from tests.integration.test_pulumi_cli import Project
from tests.integration.test_real_nodes_stack import (
    deployed,  # noqa: F401 - the fixture
)
from tests.integration.test_real_nodes_stack import (
    test_a_fault_in_a_real_nodes_kernel_log_is_repaired_by_the_pods as repair_one_node,
)

pytestmark = pytest.mark.integration


def test_pulumi_destroy_after_a_real_repair_leaves_the_real_nodes_unmarked(
        real_cluster: ClusterHandle, deployed: tuple[Project, str, str, list[RealNode]]) -> None:  # noqa: F811
    proj, ns, _pool, nodes = deployed
    repair_one_node(real_cluster, deployed)  # pulumi up, then one repair through the pods
    kube, names = real_cluster.kube, Names()
    conditions = {n.name: [c["type"] for c in kube.get_node(n.name)["status"].get("conditions") or []
                           if c["type"] in condition_types_ours(names)] for n in nodes}
    assert all(conditions.values()), conditions  # the detector pods wrote theirs on every node
    proj.pulumi("destroy", "--yes", timeout=900)
    for node in nodes:
        obj = kube.get_node(node.name)
        assert marks_of(names, obj) == [], obj
        assert not obj["spec"].get("unschedulable") and node_ready(obj)

    def namespace_gone() -> bool:
        try:
            kube.get(f"/api/v1/namespaces/{ns}")
        except NotFound:
            return True
        return False

    wait_for(f"namespace {ns} to be gone", namespace_gone, timeout=120)
