"""What each of NVIDIA's resolution buckets means here: one table, bucket -> severity and repair.

The source of the buckets is NVIDIA's Xid Catalog ("Resolution Bucket (Immediate Action)",
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and its "Guidance Classes"
sheet for what each bucket asks of an operator). Every GPU entry of ``catalog.yaml`` names
its bucket; its severity and action come from this table and nowhere else (the parser
refuses an entry that says otherwise).

This product has one repair of a GPU node short of replacing it, the node reset (a reboot of
the machine, through the pool's provider); it has no single-GPU reset yet. So every bucket
that asks for a GPU reset, a VM restart or a bare-metal restart maps to ``reset``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autoclusters.api import CatalogAction, XidBucket


class Severity(StrEnum):
    FATAL = "fatal"  # raises the node condition and, after the window, a repair (if its action is one)
    WARNING = "warning"  # recorded as an event only
    INFO = "info"  # logged only


@dataclass(frozen=True)
class BucketRule:
    severity: Severity
    action: CatalogAction
    application: bool  # NVIDIA treats the code as an application or software error: never a node repair
    meaning: str  # the docs' words for what NVIDIA's bucket asks and what this product does


BUCKETS: dict[XidBucket, BucketRule] = {
    XidBucket.RESTART_APP: BucketRule(
        Severity.WARNING, CatalogAction.NONE, True,
        "restart the application; a GPU reset or node restart is not needed: an event, no repair"),
    XidBucket.IGNORE: BucketRule(
        Severity.INFO, CatalogAction.NONE, True, "no action required: logged, no repair"),
    XidBucket.WORKFLOW_XID_45: BucketRule(
        Severity.INFO, CatalogAction.NONE, True,
        "solo: restart Fabric Manager; with another Xid: follow that one: logged, no repair"),
    XidBucket.UPDATE_SWFW: BucketRule(
        Severity.WARNING, CatalogAction.NONE, True,
        "update software and firmware (a vGPU guest/host mismatch): an event, no repair"),
    XidBucket.CHECK_UVM: BucketRule(
        Severity.WARNING, CatalogAction.NONE, True,
        "with UVM/vGPU a GPU reset, otherwise ignore: an event, no repair"),
    # No reset clears these: the GPU (or its seating and power) is at fault. Replacing the node takes
    # it out of service and brings a healthy one; under propose a person decides, and a pool with no
    # replace provider holds the repair with the node marked, which is where support is called.
    XidBucket.CONTACT_SUPPORT: BucketRule(
        Severity.FATAL, CatalogAction.REPLACE, False,
        "contact support: no reset clears it: node replacement (the old machine goes to support)"),
    XidBucket.CHECK_MECHANICALS: BucketRule(
        Severity.FATAL, CatalogAction.REPLACE, False,
        "check the device's seating and power: no reset clears it: node replacement"),
    XidBucket.RESET_GPU: BucketRule(Severity.FATAL, CatalogAction.RESET, False, "reset the GPU: node reset"),
    XidBucket.RESTART_VM: BucketRule(Severity.FATAL, CatalogAction.RESET, False, "restart the VM: node reset"),
    XidBucket.RESTART_BM: BucketRule(
        Severity.FATAL, CatalogAction.RESET, False, "restart the bare-metal machine: node reset"),
    XidBucket.WORKFLOW_XID_48: BucketRule(
        Severity.FATAL, CatalogAction.RESET, False,
        "solo: reset the GPU; with Xid 63 or 64: drain and reset: node reset (which drains)"),
    XidBucket.WORKFLOW_NVLINK_ERR: BucketRule(
        Severity.FATAL, CatalogAction.RESET, False,
        "decode the NVLink registers; a GPU reset or node reboot clears it: node reset"),
    XidBucket.WORKFLOW_NVLINK5_ERR: BucketRule(
        Severity.FATAL, CatalogAction.RESET, False,
        "decode intrInfo and errorStatus (the catalog's Xid 144-150 sheet, not decoded here): node reset"),
    XidBucket.XID_154: BucketRule(
        Severity.FATAL, CatalogAction.NONE, False,
        "follow the recovery action the line names: none, drain P2P: no repair; GPU reset, drain and "
        "reset, node reboot: node reset"),
    XidBucket.UNPUBLISHED: BucketRule(
        Severity.FATAL, CatalogAction.NONE, False,
        "NVIDIA lists the code without a bucket: the condition is raised; no repair"),
}

APPLICATION_BUCKETS = frozenset(b for b, rule in BUCKETS.items() if rule.application)
