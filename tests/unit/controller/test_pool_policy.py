"""A pool's policy as the controller reads it: consent mode, per-class overrides, timings."""

from __future__ import annotations

from autoclusters.api import ConsentMode, RepairAction
from autoclusters.controller.pool_policy import parse_pool
from autoclusters.controller.statemachine import RepairPolicy
from autoclusters.faults.catalog import FaultRef, load_catalog
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


def _gpu(message: str) -> FaultRef:
    ref = load_catalog().fault_from_condition({"type": "AutoClustersGPUFault", "status": "True",
                                               "reason": "NvidiaXIDError", "message": message}, NAMES)
    assert ref is not None
    return ref


def test_only_repair_codes_repair_application_unknown_and_none_action_codes() -> None:
    app = _gpu("GPU 3 reported Xid 13 (Graphics Engine Exception).")
    unknown = _gpu("GPU 3 reported Xid 999 (not in the fault catalog).")
    unpublished = _gpu("GPU 3 reported Xid 162 (Power Smoothing HW Circuitry capability reengaged).")
    support = _gpu("GPU 3 reported Xid 142 (NVENC3 Error).")  # CONTACT_SUPPORT: no reset clears it
    reboot = _gpu("GPU 3 reported Xid 154 (GPU recovery action: Node Reboot Required).")
    assert app.application and not unknown.known
    by_class = parse_pool({"metadata": {"name": "c"}, "spec": {"faultClasses": {"gpu": "replace"}}})
    assert [by_class.action_for(f) for f in (app, unknown, unpublished)] == [None, None, None]
    assert by_class.action_for(reboot) == RepairAction.REPLACE
    assert parse_pool({"metadata": {"name": "d"}, "spec": {}}).action_for(support) == RepairAction.REPLACE
    assert by_class.action_for(support) == RepairAction.REPLACE
    named = parse_pool({"metadata": {"name": "n"}, "spec": {"faultClasses": {"gpu": "off"}, "repairCodes": {
        "gpu:13": "reset", "gpu:999": "replace"}}})
    assert named.action_for(app) == RepairAction.RESET
    assert named.action_for(unknown) == RepairAction.REPLACE
    assert named.action_for(unpublished) is None


def test_a_provider_that_carries_a_reset_out_as_a_replacement_makes_the_repair_one() -> None:
    """clusterapi deletes the Machine for a reset (ProviderKind.carries_out): the pool's action is
    then a replacement, said so; a pool whose reset goes to another provider keeps its reset."""
    xid = _gpu("GPU 3 reported Xid 79 (GPU has fallen off the bus).")  # the catalog: reset
    capi = parse_pool({"metadata": {"name": "a"}, "spec": {"provider": {"type": "clusterapi"}}})
    assert capi.chosen_action(xid) == RepairAction.RESET
    assert capi.action_for(xid) == RepairAction.REPLACE
    action, note = capi.carried_out(RepairAction.RESET)
    assert action == RepairAction.REPLACE
    assert note == ("The pool's reset provider clusterapi carries out a reset as a replacement, "
                    "so the node is replaced.")
    assert capi.carried_out(RepairAction.REPLACE) == (RepairAction.REPLACE, "")
    split = parse_pool({"metadata": {"name": "b"}, "spec": {"provider": {
        "type": "clusterapi", "reset": {"type": "hostReboot"}}}})
    assert split.action_for(xid) == RepairAction.RESET and split.carried_out(RepairAction.RESET)[1] == ""
