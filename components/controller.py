"""``Controller``: the remediation controller Deployment and its PodDisruptionBudget."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from autoclusters.deploy import DEFAULT_NAMESPACE, stack, workloads
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

    def __post_init__(self) -> None:
        require_namespace(self.namespace, "Controller")
        require_image(self.image, "Controller")
        require_positive(self.replicas, "Controller", "replicas")
        if self.replicas < 2:
            # One replica plus a PDB of minAvailable 1 would block every drain of its node.
            raise ComponentArgsError("Controller: replicas must be >= 2 (leader election and the PodDisruptionBudget "
                                     f"need a standby), got {self.replicas}")
        why = event_source_error(self.event_source)
        if why:
            raise ComponentArgsError(f"Controller: {why}")


class Controller(pulumi.ComponentResource):
    """Leader-elected replicas (the Lease role is in ``Rbac``) kept available through drains by a PDB."""

    deployment_name: pulumi.Output[str]

    def __init__(self, name: str, args: ControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:Controller", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        dep, pdb = stack.controller_objects(args.names, args.namespace, args.image, args.replicas, args.event_source)
        created = k8s_resource(dep, child)
        k8s_resource(pdb, child)
        self.deployment_name = created.metadata.apply(lambda m: m["name"])
        self.register_outputs({"deployment_name": self.deployment_name})
