"""The Cluster API provider's object handling (the Machine a node names, the remediation patch)."""

from __future__ import annotations

from datetime import UTC, datetime

from autoclusters.controller.statemachine import (
    Operation,
    RepairAction,
)
from autoclusters.providers.clusterapi import machine_ref, remediation_patch

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_capi_machine_ref_and_patch() -> None:
    node = {"metadata": {"annotations": {"cluster.x-k8s.io/machine": "m-1",
                                         "cluster.x-k8s.io/cluster-namespace": "capi"}}}
    ref = machine_ref(node)
    assert ref is not None and ref.path() == "/apis/cluster.x-k8s.io/v1beta1/namespaces/capi/machines/m-1"
    assert machine_ref({"metadata": {}}) is None
    op = Operation("r-1", RepairAction.RESET, T)
    patch = remediation_patch(op, "2026-03-01T12:00:00Z")
    assert set(patch["metadata"]["annotations"]) == {"cluster.x-k8s.io/remediate-machine",
                                                     "remediation.autoclusters.io/operation"}
