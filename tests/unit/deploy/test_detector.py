"""The detector's RBAC grant is the minimum its code uses; the admission policy follows the names."""

from typing import Any

from autoclusters.deploy.detector import NODE_NAME_EXTRA, detector_rbac
from autoclusters.names import Names


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


def test_the_grant_is_read_nodes_patch_status_create_events() -> None:
    role = by_kind(detector_rbac(Names()))["ClusterRole"]
    grants = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert grants == {("nodes", "get"), ("nodes/status", "patch"), ("events", "create")}
    # a local cluster's simulated fleet lists and watches the nodes it serves
    local = by_kind(detector_rbac(Names(), local=True))["ClusterRole"]
    assert {(r["resources"][0], v) for r in local["rules"] for v in r["verbs"]} == grants | {
        ("nodes", "list"), ("nodes", "watch")}


def test_the_policy_binds_the_service_account_and_the_condition_types() -> None:
    objs = by_kind(detector_rbac(Names(domain="crusoe.ai", prefix="Crusoe"), namespace="gpu-ops"))
    policy, binding = objs["ValidatingAdmissionPolicy"], objs["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "system:serviceaccount:gpu-ops:autoclusters-detector" in policy["spec"]["matchConditions"][0]["expression"]
    text = str(policy["spec"]["validations"])
    assert "'CrusoeGPUFault'" in text and "'GPUHealthDetectorDegraded'" in text and NODE_NAME_EXTRA in str(policy)
    sub = objs["ClusterRoleBinding"]["subjects"][0]
    assert (sub["namespace"], sub["name"]) == ("gpu-ops", "autoclusters-detector")
    assert objs["ClusterRole"]["metadata"]["name"] != "autoclusters-detector"  # one per namespace
