"""``Detector``: the node agent DaemonSet on every GPU node."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from autoclusters.api import DEFAULT_KERNEL_LOG_SOURCE, KernelLogSource
from autoclusters.deploy import DEFAULT_NAMESPACE, stack
from autoclusters.deploy.detector_settings import DetectorSettings
from autoclusters.deploy.nvml_reach import NvmlReach
from autoclusters.deploy.pod_settings import PodSettings
from autoclusters.names import Names
from components._args import require_image, require_namespace
from components._k8s import k8s_resource


@dataclass(frozen=True)
class DetectorArgs:
    image: str
    names: Names = field(default_factory=Names)
    namespace: str = DEFAULT_NAMESPACE
    # Wait for a pod on every GPU node. Off on the shared local cluster, where nodes of other
    # pools may be mid-repair (NotReady) and would hold ``pulumi up`` until its timeout.
    await_rollout: bool = True
    condition_codes: tuple[str, ...] = ()  # the detector's --condition-codes (stack detectorConditionCodes)
    kernel_log_source: KernelLogSource = DEFAULT_KERNEL_LOG_SOURCE  # kmsg or journal (stack: kernelLogSource)
    # where the detectors read DCGM from (the stack setting ``detector``)
    settings: DetectorSettings = field(default_factory=DetectorSettings)
    nvml: NvmlReach = field(default_factory=NvmlReach)  # the stack's nvml setting (deploy/nvml_reach.py)
    pods: PodSettings = field(default_factory=PodSettings)  # the stack's pods / imagePullSecrets settings

    def __post_init__(self) -> None:
        require_namespace(self.namespace, "Detector")
        require_image(self.image, "Detector")


class Detector(pulumi.ComponentResource):
    """The DaemonSet; its RBAC lives in ``Rbac`` so least privilege is reviewed in one place."""

    daemonset_name: pulumi.Output[str]

    def __init__(self, name: str, args: DetectorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:Detector", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ds = k8s_resource(args.pods.customize(stack.detector_daemonset(args.names, args.namespace, args.image,
                                                   await_rollout=args.await_rollout,
                                                   condition_codes=args.condition_codes,
                                                   kernel_log_source=args.kernel_log_source, settings=args.settings,
                                                   nvml=args.nvml)), child)
        self.daemonset_name = ds.metadata.apply(lambda m: m["name"])
        self.register_outputs({"daemonset_name": self.daemonset_name})
