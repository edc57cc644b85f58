"""A pool's policy as the controller reads it: consent mode, per-class overrides, timings."""

from __future__ import annotations

from autoclusters.api import ConsentMode, RepairAction
from autoclusters.controller.pool_policy import parse_pool
from autoclusters.controller.statemachine import RepairPolicy
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names

NAMES = Names()


def test_pool_policy_and_fault_class_overrides() -> None:
    pool = parse_pool({"metadata": {"name": "a"}, "spec": {"consentMode": "propose",
                                                          "faultClasses": {"gpu": "replace", "dcgm": "off"}}})
    cat = load_catalog()
    xid = cat.fault_from_condition({"type": "AutoClustersGPUFault", "status": "True", "reason": "NvidiaXIDError",
                                    "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)."}, NAMES)
    assert xid is not None and pool.action_for(xid) == RepairAction.REPLACE
    dcgm = cat.fault_from_condition({"type": "AutoClustersGPUFault", "status": "True", "reason": "NvidiaDCGMError",
                                     "message": "DCGM_FR_NVLINK_DOWN on GPU 1"}, NAMES)
    assert dcgm is not None and pool.action_for(dcgm) is None
    default = parse_pool({"metadata": {"name": "b"}, "spec": {}})
    assert default.mode == ConsentMode.AUTO and default.action_for(xid) == RepairAction.RESET
    assert default.policy(RepairPolicy(verify_timeout_seconds=7)).max_repairs == 3
    assert default.policy(RepairPolicy(verify_timeout_seconds=7)).verify_timeout_seconds == 7
    assert default.policy(RepairPolicy(approval_label="crusoe.ai/maintenance-approved")).approval_label \
        == "crusoe.ai/maintenance-approved"
