"""Every name autoclusters writes into a cluster, derived from one domain and one prefix.

The defaults are ``autoclusters.io`` / ``AutoClusters``. Setting ``crusoe.ai`` / ``Crusoe``
makes labels, taints, conditions and events match the reference system's contract, so
its documented kubectl commands and approval scripts work unchanged.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from autoclusters import api

DEFAULT_DOMAIN = "autoclusters.io"
DEFAULT_PREFIX = "AutoClusters"
# The reference system's event source (what ``kubectl describe node`` shows under From).
# Not a default: the controller's ``event_source`` setting defaults to its own name, and an
# operator who migrates sets this value (docs/operations.md).
REFERENCE_EVENT_SOURCE = "nodepool-service"

_DOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
_PREFIX_RE = re.compile(r"^[A-Z][A-Za-z0-9]{0,30}$")
# An event's reportingComponent must be a qualified name: an optional DNS subdomain and
# "/", then up to 63 characters of [A-Za-z0-9-_.] that start and end alphanumeric.
QUALIFIED_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # also the chart's schema of eventSource
_QUALIFIED_RE = re.compile(QUALIFIED_PATTERN)

# The detector's own health condition: the same under every brand and not starting with
# the condition prefix (see Names.detector_health_condition).
DETECTOR_HEALTH_CONDITION = "GPUHealthDetectorDegraded"

# Condition reasons (docs/contract.md, "Names"). They do not depend on the domain.
REASON_XID = "NvidiaXIDError"
REASON_SXID = "NvidiaSXIDError"
REASON_DCGM = "NvidiaDCGMError"
REASON_GPU_OTHER = "GpuError"
REASON_NO_GPU_FAULT = "NoGpuFaultDetected"
REASON_INTERCONNECT = "InterconnectError"
REASON_NO_INTERCONNECT_FAULT = "NoInterconnectFaultDetected"
# The detector's health condition (never a fault): True when it cannot read a source, its poll
# failed, or a source the node's hardware implies is unavailable (NVML on a GPU node); False
# when every source it reads is readable.
REASON_SOURCE_UNREADABLE = "FaultSourceUnreadable"
REASON_POLL_FAILED = "DetectorPollFailed"
REASON_EXPECTED_SOURCE_UNAVAILABLE = "ExpectedFaultSourceUnavailable"
REASON_SOURCES_READABLE = "AllFaultSourcesReadable"

# Event reasons (docs/contract.md, "Events"; tests/unit/test_contract_doc.py keeps them equal).
EVENT_REQUIRED = "MaintenanceRequired"
EVENT_AWAITING_APPROVAL = "MaintenanceAwaitingApproval"
EVENT_APPROVED = "MaintenanceApproved"
EVENT_SCHEDULED = "MaintenanceScheduled"
EVENT_STARTED = "MaintenanceStarted"
EVENT_ESCALATED = "MaintenanceEscalated"
EVENT_FAILED = "MaintenanceActionFailed"
EVENT_SUCCEEDED = "MaintenanceSucceeded"
EVENT_FAULT_CLEARED = "MaintenanceNotNeeded"
EVENT_BLOCKED = "MaintenanceBlocked"
EVENT_BREAKER_OPEN = "RepairCircuitBreakerOpen"
EVENT_BREAKER_CLOSED = "RepairCircuitBreakerClosed"
EVENT_BUDGET_EXHAUSTED = "MaintenanceAttemptBudgetExhausted"
EVENT_DRAIN_WARNING = "MaintenanceDrainWarning"  # on the node and on each pod, before any eviction
EVENT_DRAIN_WAIT_ENDED = "MaintenanceDrainWaitEnded"  # acknowledged, or the pre-drain deadline passed
EVENT_HOOK_FAILED = "MaintenancePreDrainHookFailed"
EVENT_RECORD_UNREADABLE = "MaintenanceRecordUnreadable"  # the node's open Remediation record cannot be read
EVENT_UNKNOWN_CODE = "UnknownFaultCode"  # the detector saw a code its catalog does not list (reported, not repaired)
EVENT_STRAY_APPROVAL_REMOVED = "MaintenanceApprovalRemoved"  # an approval no maintenance-required backed

# Slinky's slurm-operator (slurmd in pods): the node annotation it reads as the Slurm drain
# reason when the node is cordoned, and the prefix of the pod conditions that mirror the
# Slurm node's state onto each slurmd pod (SlurmNodeStateAllocated, ...Drain, ...).
SLINKY_CORDON_REASON = "nodeset.slinky.slurm.net/node-cordon-reason"
SLINKY_STATE_PREFIX = "SlurmNodeState"
# The name the Slurm bridge acknowledges a drain under (a pool lists it in preDrain.acknowledgers).
SLURM_ACKNOWLEDGER = "slurm"
# The Slurm reason prefix that marks a drain as ours (the Slurm bridge resumes only these).
DRAIN_REASON_PREFIX = "autoclusters:"


def event_source_error(source: str) -> str | None:
    """Why ``source`` cannot be an event source (``source.component`` /
    ``reportingComponent``), or None when it can."""
    if not isinstance(source, str) or not _QUALIFIED_RE.match(source) or len(source.partition("/")[0]) > 253:
        return (f"event source {source!r} must be a Kubernetes qualified name (letters, digits, '-', '_', '.', "
                "at most 63 characters, optionally after a DNS subdomain and '/'), e.g. nodepool-service")
    return None


class NameError_(ValueError):
    """A domain or prefix that cannot be used in Kubernetes names."""


@dataclass(frozen=True)
class Names:
    """The label, taint, condition and API names for one domain/prefix pair."""

    domain: str = DEFAULT_DOMAIN
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _DOMAIN_RE.match(self.domain) or len(self.domain) > 200:
            raise NameError_(f"invalid domain {self.domain!r}: expected a DNS name such as autoclusters.io")
        if not _PREFIX_RE.match(self.prefix):
            raise NameError_(
                f"invalid condition prefix {self.prefix!r}: expected a capitalised word such as AutoClusters"
            )

    # Labels and taint -------------------------------------------------------------
    @property
    def pool_label(self) -> str:
        return f"{self.domain}/nodepool.name"

    @property
    def maintenance_required(self) -> str:
        return f"{self.domain}/maintenance-required"

    @property
    def maintenance_approved(self) -> str:
        return f"{self.domain}/maintenance-approved"

    @property
    def taint_key(self) -> str:
        return self.maintenance_required

    @property
    def karpenter_guard_marker(self) -> str:
        """Node annotation: which of Karpenter's do-not-* annotations autoclusters added (and removes)."""
        return f"{self.domain}/added-karpenter-guards"

    @property
    def marked_at_annotation(self) -> str:
        """Node annotation on a marked Karpenter node: when the repair marked it (a replacement
        counts only nodes Karpenter launched after this moment)."""
        return f"{self.domain}/marked-at"

    @property
    def auto_replacement_label(self) -> str:
        """Pod label; value ``disabled`` opts the pod's node out of automatic replacement."""
        return f"{self.domain}/auto-replacement"

    # The warning before a drain (node and pod annotations) ------------------------------
    @property
    def drain_deadline(self) -> str:
        """RFC 3339 UTC time when eviction starts at the latest (node and pods)."""
        return f"{self.domain}/drain-deadline"

    @property
    def drain_reason(self) -> str:
        """Human text naming the fault and the Remediation record (node and pods)."""
        return f"{self.domain}/drain-reason"

    @property
    def remediation(self) -> str:
        """The Remediation record's name (node and pods): what an acknowledgement must repeat."""
        return f"{self.domain}/remediation"

    @property
    def drain_ack_prefix(self) -> str:
        """Node annotation ``<prefix><acknowledger>`` = the record's name: that acknowledger is ready."""
        return f"{self.domain}/drain-ack-"

    def drain_ack(self, acknowledger: str) -> str:
        return f"{self.drain_ack_prefix}{acknowledger}"

    @property
    def slurm_jobs(self) -> str:
        """Node annotation written by the Slurm bridge during a repair: the record, the jobs it
        signalled (when, restart count) and requeued, so a restarted bridge carries on."""
        return f"{self.domain}/slurm-jobs"

    @property
    def slurm_external_drain(self) -> str:
        """Node annotation written by the Slurm bridge: the node's Slurm drain that someone else
        (an admin, a HealthCheckProgram) set, as ``<reason> (by <user> at <time>)``."""
        return f"{self.domain}/slurm-external-drain"

    @property
    def slurm_cordoned(self) -> str:
        """Node annotation written by the Slurm bridge: it cordoned this node for an external Slurm drain."""
        return f"{self.domain}/slurm-cordoned"

    @property
    def slurm_bridge_annotations(self) -> tuple[str, ...]:
        """Every node annotation the Slurm bridge writes (its admission policy allows it these alone)."""
        return (self.drain_ack(SLURM_ACKNOWLEDGER), self.slurm_cordoned, self.slurm_jobs, self.slurm_external_drain)

    @property
    def pod_drain_ack(self) -> str:
        """Pod annotation = the record's name: this pod is ready to be evicted (e.g. checkpoint saved)."""
        return f"{self.domain}/drain-ack"

    @property
    def drain_wait_label(self) -> str:
        """Pod label; value ``true``: the repair waits for this pod's acknowledgement (up to the deadline)."""
        return f"{self.domain}/drain-wait"

    @property
    def warning_annotations(self) -> tuple[str, str, str]:
        """The three annotations of the warning, written on the node and on each pod."""
        return (self.drain_deadline, self.drain_reason, self.remediation)

    # Conditions --------------------------------------------------------------------
    @property
    def gpu_condition(self) -> str:
        return f"{self.prefix}GPUFault"

    @property
    def interconnect_condition(self) -> str:
        return f"{self.prefix}InterconnectFault"

    @property
    def detector_health_condition(self) -> str:
        """The agent's own health (a source it cannot read); never a GPU fault.

        Deliberately *not* under the condition prefix: the reference system's users read
        every condition whose type starts with the prefix as a fault report, so a
        ``True`` here must not look like one to their scripts."""
        return DETECTOR_HEALTH_CONDITION

    @property
    def fault_conditions(self) -> tuple[str, str]:
        return (self.gpu_condition, self.interconnect_condition)

    # API group for the custom resources ------------------------------------------------
    @property
    def api_group(self) -> str:
        return f"{api.GROUP_PREFIX}.{self.domain}"

    def crd_name(self, resource: api.Resource) -> str:
        """The name of the CustomResourceDefinition of one of our resources."""
        return f"{resource.plural}.{self.api_group}"

    @property
    def operation_annotation(self) -> str:
        """On what a provider operation acts through (a Machine, a reboot Job): its operation id."""
        return f"{self.api_group}/operation"

    @property
    def operation_node_annotation(self) -> str:
        """On a reboot Job: the node it reboots."""
        return f"{self.api_group}/node"

    @property
    def redfish_system_annotation(self) -> str:
        """Node annotation, written by the operator: the URL of the node's system on its BMC
        (``https://BMC[:PORT]/redfish/v1/Systems/ID``), which the redfish provider resets."""
        return f"redfish.{self.domain}/system"

    @property
    def redfish_reset_annotation(self) -> str:
        """Node annotation written by the redfish provider before it asks the BMC for a reset: the
        operation id, so a restarted controller never resets the system twice for one operation."""
        return f"redfish.{self.domain}/reset-operation"

    @property
    def ec2_reset_annotation(self) -> str:
        """Node annotation written by the ec2 provider before each request that resets the
        instance: ``OPERATION/STEP`` (reboot, stop, start), so a restarted controller never asks
        twice for one operation."""
        return f"ec2.{self.domain}/reset-operation"

    @classmethod
    def from_env(cls) -> Names:
        return cls(
            domain=os.environ.get("AUTOCLUSTERS_DOMAIN", DEFAULT_DOMAIN),
            prefix=os.environ.get("AUTOCLUSTERS_CONDITION_PREFIX", DEFAULT_PREFIX),
        )
