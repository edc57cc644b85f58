"""``Crds``: the GpuNodePool and Remediation CustomResourceDefinitions."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from autoclusters.deploy import crds
from autoclusters.names import Names
from components._k8s import k8s_resource


@dataclass(frozen=True)
class CrdsArgs:
    names: Names = field(default_factory=Names)


class Crds(pulumi.ComponentResource):
    """Pool objects depend on this component, so they are created only once their CRD is served."""

    names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: CrdsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:Crds", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        created = [k8s_resource(obj, child) for obj in crds.crds(args.names)]
        self.names = pulumi.Output.all(*[c.metadata.apply(lambda m: m["name"]) for c in created])
        self.register_outputs({"names": self.names})
