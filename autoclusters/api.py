"""The API of autoclusters, written once: its objects, enums and the controller's defaults.

(A pool's settings, their defaults and ranges, are the pool's field table,
``autoclusters/pool_fields.py``, which builds on the enums here.)

Everything that names a consent mode, a fault class, a repair action or a phase takes it
from here:

- the CRD schemas (``deploy/crds.py``: enums),
- the strict pool parser (``pools/pool_config.py``) and with it the Pulumi components' args,
- the controller (every module imports the enums from here; its ``RepairPolicy`` and
  ``ControllerConfig`` take their defaults from here) and the CLI's choices,
- the Rego policies, through ``policies/lib/api.rego``, generated from ``rego_data`` by
  ``make manifests``,
- the tables of docs/contract.md (checked by tests/unit/test_api_docs.py).

``tests/unit/rego/test_policy_data_api_parity.py`` proves the CRD enums, these enums and what
``opa eval`` returns for the policy's sets equal. Adding a consent mode or a fault class is
a member here, then ``make manifests``; the tests name every other place that must follow
(docs/architecture.md, "Change recipes", lists every file of each change).

This module is the lowest layer: it imports nothing from the package.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# --- objects -------------------------------------------------------------------------------
GROUP_PREFIX = "remediation"  # the API group is remediation.<domain> (names.Names.api_group)
# The version the CRDs store and every client of ours speaks. v1beta1, not v1: the schema is
# complete and tested, and a change that is not compatible comes only with a new version served
# beside it (docs/deploy.md, "Upgrading"); v1 would promise the schema never changes
# incompatibly, while the providers' settings are still growing.
VERSION = "v1beta1"
# Still served, with the same schema (deploy/crds.py builds every version from one schema, so
# the conversion is None: the API server only rewrites apiVersion). Deprecated: kubectl warns.
OLD_VERSIONS = ("v1alpha1",)
SERVED_VERSIONS = (VERSION, *OLD_VERSIONS)


@dataclass(frozen=True)
class Resource:
    """One custom resource of the API group (cluster-scoped, with a status subresource)."""

    kind: str
    plural: str
    short_name: str

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


POOLS = Resource("GpuNodePool", "gpunodepools", "gnp")  # a pool's policy, written by Pulumi or git
REMEDIATIONS = Resource("Remediation", "remediations", "rem")  # one repair's record (its state in status)


# --- enums ---------------------------------------------------------------------------------
class ConsentMode(StrEnum):
    """Who decides when a pool's repair starts (docs/contract.md, "Pools and consent modes")."""

    AUTO = "auto"
    PROPOSE = "propose"
    OFF = "off"


DEFAULT_CONSENT_MODE = ConsentMode.AUTO
CONSENT_MODE_SUMMARY = {  # the CRD field's description
    ConsentMode.AUTO: "repair at once",
    ConsentMode.PROPOSE: "wait for the approval label",
    ConsentMode.OFF: "report only",
}


class FaultClass(StrEnum):
    """The kinds of fault the catalog sorts codes into; a pool may override each one's action."""

    GPU = "gpu"  # Xid and other GPU faults
    NVSWITCH = "nvswitch"  # SXid
    DCGM = "dcgm"  # DCGM health / diagnostics
    INTERCONNECT = "interconnect"  # InfiniBand HCA / ports


class RepairAction(StrEnum):
    """What a repair does to a node (a Remediation's ``action``, what a provider carries out)."""

    RESET = "reset"
    REPLACE = "replace"


class CatalogAction(StrEnum):
    """The fault catalog's action for a code: a repair action, or ``none`` (report only)."""

    RESET = RepairAction.RESET.value
    REPLACE = RepairAction.REPLACE.value
    NONE = "none"  # report only (or an application error): never repaired


class ClassAction(StrEnum):
    """A pool's per fault class override (``spec.faultClasses``): ``default`` keeps the
    catalog's action, ``off`` ignores the class entirely, or a repair action."""

    DEFAULT = "default"
    RESET = RepairAction.RESET.value
    REPLACE = RepairAction.REPLACE.value
    OFF = "off"


# A pool's explicit repairs by code (``spec.repairCodes``): "<class>:<code>" -> a repair action.
# The one way a code whose catalog action is none (an application or software bucket, an
# unknown code) is repaired; codes are Xid / SXid numbers or NVML, DCGM and InfiniBand names.
REPAIR_CODE_PATTERN = "^(" + "|".join(c.value for c in FaultClass) + "):[A-Za-z0-9_]{1,64}$"


class XidBucket(StrEnum):
    """NVIDIA's resolution buckets (the Xid Catalog's "Resolution Bucket (Immediate Action)"
    column, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), spelled as NVIDIA
    spells them. ``UNPUBLISHED`` is ours: the catalog lists the code but gives it no bucket.
    What each bucket repairs is one table, ``faults/buckets.py``."""

    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    RESET_GPU = "RESET_GPU"
    RESTART_VM = "RESTART_VM"
    RESTART_BM = "RESTART_BM"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_154 = "XID_154"
    UNPUBLISHED = "UNPUBLISHED"


class DriverRecoveryAction(StrEnum):
    """The recovery action an Xid 154 line asks for ("GPU recovery action changed from 0x0 (None)
    to 0x2 (Node Reboot Required)"). The numbers are NVML's ``nvmlDeviceGpuRecoveryAction_t``
    (NONE 0, GPU_RESET 1, NODE_REBOOT 2, DRAIN_P2P 3, DRAIN_AND_RESET 4, and GPU_RESET_BUS 5 of
    newer drivers, a GPU reset); the words the Xid
    Catalog lists for Xid 154's values are these members' values."""

    NONE = "None"
    GPU_RESET = "GPU Reset Required"
    NODE_REBOOT = "Node Reboot Required"
    DRAIN_P2P = "Drain P2P"
    DRAIN_AND_RESET = "Drain and Reset"


class SignalTarget(StrEnum):
    """Which processes of a job the Slurm bridge signals (``spec.slurm.signalTo``; scancel's scopes)."""

    STEPS = "steps"  # every job step (srun), not the batch shell: scancel --signal=SIG JOB
    BATCH = "batch"  # the batch shell only: scancel --batch --signal=SIG JOB
    ALL = "all"  # the batch shell, its children and every step: scancel --full --signal=SIG JOB


# Signals a job may be sent before its requeue (``spec.slurm.signal``; names as scancel takes
# them, without SIG); "" sends none.
SLURM_SIGNALS = ("TERM", "USR1", "USR2", "INT", "HUP", "QUIT")


class Phase(StrEnum):
    """The phases of a repair (a Remediation's ``status.phase``); docs/controller.md walks them."""

    AWAITING_APPROVAL = "AwaitingApproval"  # propose: marked, waiting for the approval label
    SCHEDULED = "Scheduled"  # decided; waiting for the guards (opt-out, concurrency, breaker)
    DRAINING = "Draining"  # warned and cordoned; waiting for acknowledgements, then pods being evicted
    ACTING = "Acting"  # the provider is resetting or replacing the node
    VERIFYING = "Verifying"  # waiting for a healthy node
    SUCCEEDED = "Succeeded"  # terminal
    NOT_NEEDED = "NotNeeded"  # terminal: the fault cleared before the repair started
    FAILED = "Failed"  # holding: labels and condition stay until the fault clears
    HUMAN_NEEDED = "HumanNeeded"  # holding: the attempt budget is spent
    CLOSED = "Closed"  # terminal: a holding or cancelled record, closed


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.NOT_NEEDED, Phase.CLOSED})  # the record is history
HOLDING = frozenset({Phase.FAILED, Phase.HUMAN_NEEDED})  # waits for the fault to clear or a person
IN_PROGRESS = frozenset({Phase.DRAINING, Phase.ACTING, Phase.VERIFYING})  # counts against maxConcurrentRepairs


class BreakerState(StrEnum):
    """A pool's circuit breaker (``status.circuitBreaker.state``)."""

    CLOSED = "Closed"
    OPEN = "Open"


# --- controller defaults (flags of `autoclusters controller run`) --------------------------
VERIFY_TIMEOUT_SECONDS = 600.0  # a repaired node must be healthy within
OPERATION_TIMEOUT_SECONDS = 1800.0  # a provider operation has failed after
POLL_SECONDS = 2.0  # how often a repair in progress is looked at
HOLD_RECHECK_SECONDS = 10.0  # how often a held repair re-checks its guards
RETENTION_DAYS = 90.0  # closed Remediation records are kept
PERSISTENCE_WINDOW_SECONDS = 60.0  # a fault must stay active this long before its condition turns True
# the namespace of an installation (its cluster-scoped objects carry no suffix there)
DEFAULT_NAMESPACE = "autoclusters-system"
# What the controller keeps of an operator's program (the pre-drain hook, the command
# provider's script): at most this many bytes of each output stream and of a hook's HTTP
# answer, the last ones; what it reports of them (events, logs, the record) is cut further
# to OUTPUT_REPORT_CHARS, redacted (autoclusters/redact.py), the cut said in the text.
OUTPUT_CAPTURE_BYTES = 4096
OUTPUT_REPORT_CHARS = 300
# Threads that run pre-drain hooks, beside the reconcile workers (which never wait for one).
HOOK_WORKERS = 4
# The simulated provider (kwok nodes of the local cluster): how long a reset / replacement
# takes unless the pool's provider.simulated settings say otherwise.
SIM_RESET_SECONDS = 30.0
SIM_REPLACE_SECONDS = 30.0
# The host-reboot provider's command, run inside the host's namespaces (shell words; the
# operator's setting --host-reboot-command / stack hostRebootCommand): systemd hosts with a
# shell (Ubuntu, COS, Flatcar, RHEL), and plain reboot where there is no systemd.
HOST_REBOOT_COMMAND = "sh -c 'systemctl reboot || reboot'"


def host_reboot_argv(text: str) -> tuple[str, ...]:
    """The host reboot command (``HOST_REBOOT_COMMAND``'s form: shell words) as argv; raises
    ValueError naming what is wrong. It runs inside the host's namespaces, so its program must
    exist on the node's OS (docs/operations.md, "hostReboot on every node OS")."""
    if not isinstance(text, str):  # shlex.split(None) would read standard input
        raise ValueError(f"the host reboot command must be a string of shell words, got {text!r}")
    try:
        argv = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"the host reboot command {text!r} is not valid shell words: {e}") from None
    if not argv:
        raise ValueError("the host reboot command is empty")
    return argv


# HOST_REBOOT_COMMAND as argv: the default of every holder of the host command (the provider,
# its build context, the reconciler's settings), so none needs an "empty means default" sentinel
DEFAULT_HOST_REBOOT_ARGV = host_reboot_argv(HOST_REBOOT_COMMAND)


# --- the detector's settings --------------------------------------------------------------
class KernelLogSource(StrEnum):
    """Where the detector reads the kernel log (``detector run --kernel-log-source``; the
    DaemonSet's, with its mounts: the stack setting ``kernelLogSource``; docs/detector.md)."""

    KMSG = "kmsg"  # /dev/kmsg, from the host
    JOURNAL = "journal"  # the host's systemd journal, the kernel's entries only
    FILE = "file"  # a kernel log file (--kernel-log PATH: simulated nodes, exports, syslog files)


DEFAULT_KERNEL_LOG_SOURCE = KernelLogSource.KMSG
# The DaemonSet's choices: a file source needs a path that no stack setting knows.
DAEMONSET_KERNEL_LOG_SOURCES = (KernelLogSource.KMSG, KernelLogSource.JOURNAL)


# --- derived forms -------------------------------------------------------------------------
def rego_data() -> dict[str, Any]:
    """What the policies need to know about the API (lists keep the order messages use)."""
    return {
        "consent_modes": [m.value for m in ConsentMode],
        "fault_classes": [c.value for c in FaultClass],
        "class_actions": [a.value for a in ClassAction],
        "repair_actions": [a.value for a in RepairAction],
        "repair_code_pattern": REPAIR_CODE_PATTERN,
        "phases": [p.value for p in Phase],
        "pool_kind": POOLS.kind,
        "group_prefix": GROUP_PREFIX,
        "version": VERSION,
    }


def generated_rego_module(*, package: str, rule: str, title: str, source: str, test: str,
                          data: dict[str, Any]) -> str:
    """A Rego module that holds ``data`` as one rule, formatted as ``opa fmt`` writes it, with a
    header naming the Python it is generated from and the test that keeps the two equal."""
    body = json.dumps(data, indent="\t", sort_keys=True)
    body = re.sub(r"([^\[{,\s])(?=\n\t*[\]}])", r"\1,", body)  # opa fmt's trailing commas
    return ("# METADATA\n"
            f"# title: {title} (generated)\n"
            "# description: |\n"
            f"#   Generated from {source} by `make manifests`; do not edit.\n"
            f"#   {test} keeps this file equal to the Python.\n"
            f"package {package}\n\n"
            f"{rule} := {body}\n")


def rego_module() -> str:
    """``policies/lib/api.rego``: the data above as a Rego module (a test keeps the file equal)."""
    return generated_rego_module(package="autoclusters.lib.api", rule="api",
                                 title="The autoclusters API's enums",
                                 source="autoclusters/api.py", test="tests/unit/rego/test_policy_data_api_parity.py",
                                 data=rego_data())


if __name__ == "__main__":
    print(rego_module(), end="")
