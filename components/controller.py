"""``Controller``: the remediation controller Deployment and its PodDisruptionBudget."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from autoclusters import api
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.deploy import DEFAULT_NAMESPACE, stack, workloads
from autoclusters.deploy.pod_settings import PodSettings
from autoclusters.names import Names, event_source_error
from components._args import ComponentArgsError, require_image, require_namespace, require_positive
from components._k8s import k8s_resource


@dataclass(frozen=True)
class ControllerArgs:
    image: str
    names: Names = field(default_factory=Names)
    namespace: str = DEFAULT_NAMESPACE
    replicas: int = stack.CONTROLLER_REPLICAS
    event_source: str = workloads.CONTROLLER  # source.component / reportingComponent of its events
    shards: int = 1  # one Deployment (and PDB) per shard, each owning the pools hashed to it
    host_reboot_command: str = api.HOST_REBOOT_COMMAND  # what the reboot Job runs in the host
    pods: PodSettings = field(default_factory=PodSettings)  # the stack's pods / imagePullSecrets settings
    flags: tuple[tuple[str, str], ...] = ()  # the stack's controller setting (deploy.controller_flags)
    allow_lists: AllowLists = NO_ENTRIES  # the only commands, images and URLs pools may name

    def __post_init__(self) -> None:
        require_namespace(self.namespace, "Controller")
        require_image(self.image, "Controller")
        require_positive(self.replicas, "Controller", "replicas")
        require_positive(self.shards, "Controller", "shards")
        if self.replicas < 2:
            # One replica plus a PDB of minAvailable 1 would block every drain of its node.
            raise ComponentArgsError("Controller: replicas must be >= 2 (leader election and the PodDisruptionBudget "
                                     f"need a standby), got {self.replicas}")
        why = event_source_error(self.event_source)
        if why:
            raise ComponentArgsError(f"Controller: {why}")


class Controller(pulumi.ComponentResource):
    """Leader-elected replicas (the Lease role is in ``Rbac``) kept available through drains by a
    PDB; with ``shards`` > 1, one such Deployment and PDB per shard."""

    deployment_name: pulumi.Output[str]  # shard 0's when sharded
    deployment_names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: ControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:Controller", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        objs = stack.controller_objects(args.names, args.namespace, args.image, args.replicas, args.event_source,
                                        shards=args.shards, host_reboot_command=args.host_reboot_command,
                                        flags=args.flags, allow_lists=args.allow_lists)
        names = []
        for obj in objs:
            created = k8s_resource(args.pods.customize(obj), child)
            if obj["kind"] == "Deployment":
                names.append(created.metadata.apply(lambda m: m["name"]))
        self.deployment_name = names[0]
        self.deployment_names = pulumi.Output.all(*names)
        self.register_outputs({"deployment_name": self.deployment_name, "deployment_names": self.deployment_names})
