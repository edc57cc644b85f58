"""``AutoClusters``: the whole system on one cluster, wired in dependency order.

Namespace → CRDs → the node cleanup → service accounts and roles → detector, controller (and
their PodMonitors and alert rules when the stack asks) → pools → webhook. ``pulumi destroy``
goes the other way, so the node cleanup (``components/node_cleanup.py``) runs once the
detector, the controller and the admission are gone, while the records it reads are still there.
The pool objects are created before the webhook configuration that validates them, so a
first ``pulumi up`` never waits on a webhook that is not serving yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from autoclusters.deploy import workloads
from autoclusters.deploy.monitoring import monitoring_objects
from autoclusters.deploy.stack_config import StackConfig
from autoclusters.pools import default_pool
from components._args import ComponentArgsError
from components._k8s import k8s_resource
from components.admission_policy import AdmissionPolicy, AdmissionPolicyArgs
from components.controller import Controller, ControllerArgs
from components.crds import Crds, CrdsArgs
from components.detector import Detector, DetectorArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs, NodeLister
from components.node_cleanup import NodeCleanup
from components.rbac import Rbac, RbacArgs


@dataclass(frozen=True)
class AutoClustersArgs:
    config: StackConfig
    kubeconfig: str | None = None
    node_lister: NodeLister | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config, StackConfig):
            raise ComponentArgsError(f"AutoClusters: config must be a StackConfig, got {type(self.config).__name__}")


class AutoClusters(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    pools: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: AutoClustersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:AutoClusters", name, None, opts)
        cfg, names = args.config, args.config.names

        def after(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(deps))

        ns = k8s_resource(workloads.namespace(cfg.namespace), after())
        crds = Crds("crds", CrdsArgs(names=names), after())
        rbac = Rbac("rbac", RbacArgs(names=names, namespace=cfg.namespace, slurm_bridge=cfg.slurm_bridge,
                                                  local=cfg.local, pods=cfg.pods,
                                                  providers=cfg.granted_providers), after(ns))
        # Deleted after the detector, the controller and the admission (they depend on it) and before
        # the CRDs and the namespace (it depends on them): pulumi destroy leaves the nodes unmarked.
        cleanup = NodeCleanup("node-cleanup", namespace=cfg.namespace, domain=names.domain, prefix=names.prefix,
                              kubeconfig=args.kubeconfig, opts=after(ns, crds))
        Detector("detector", DetectorArgs(image=cfg.image, names=names, namespace=cfg.namespace,
                                          await_rollout=not cfg.local,
                                          condition_codes=cfg.detector_condition_codes,
                                          kernel_log_source=cfg.kernel_log_source, settings=cfg.detector,
                                          nvml=cfg.nvml, pods=cfg.pods), after(rbac, cleanup))
        k8s_resource(default_pool.configmap(cfg.default_pool, cfg.namespace), after(ns),
                     name="default-pool")
        Controller("controller", ControllerArgs(image=cfg.image, names=names, namespace=cfg.namespace,
                                                      event_source=cfg.event_source, shards=cfg.controller_shards,
                                                      host_reboot_command=cfg.host_reboot_command,
                                                      pods=cfg.pods, flags=cfg.controller_flags,
                                                      allow_lists=cfg.allow_lists),
                   after(rbac, crds, cleanup))
        # The Prometheus Operator's PodMonitors and PrometheusRule (stack setting monitoring).
        for obj in monitoring_objects(cfg.monitoring, cfg.namespace, names):
            k8s_resource(obj, after(ns))
        pools = [
            GpuNodePool(f"pool-{pool.name}", GpuNodePoolArgs(pool=pool, names=names, kubeconfig=args.kubeconfig,
                                                             node_lister=args.node_lister), after(crds))
            for pool in cfg.pools
        ]
        admission = AdmissionPolicy(
            "admission",
            AdmissionPolicyArgs(image=cfg.image, opa_image=cfg.opa_image, names=names, namespace=cfg.namespace,
                                webhook_url=cfg.webhook_url, pods=cfg.pods, allow_lists=cfg.allow_lists),
            after(rbac, crds, cleanup, *pools))
        self.namespace = pulumi.Output.from_input(cfg.namespace)
        self.pools = pulumi.Output.from_input({p.name: p.consent_mode.value for p in cfg.pools})
        self.webhook_configuration_name = admission.webhook_configuration_name
        self.register_outputs({"namespace": self.namespace, "pools": self.pools,
                               "webhook_configuration_name": self.webhook_configuration_name})
