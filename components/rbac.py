"""``Rbac``: the three service accounts (four with the Slurm bridge's) and each one's least-privilege roles, with the
admission policies that keep each detector to writing its own node, the controller's pod patches to the warning's
annotations and the bridge's node patches to its own keys (``deploy.patch_limits``).

The roles come from the module of the code that uses them (``deploy.controller``,
``deploy.detector``, ``deploy.admission``, ``deploy.slurm_bridge``; ``deploy.stack.rbac_objects`` lists them), so a
new API call and its permission change in the same place; this component only creates
them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.pod_settings import PodSettings
from autoclusters.deploy.stack import rbac_objects
from autoclusters.names import Names
from components._args import require_namespace
from components._k8s import k8s_resource


@dataclass(frozen=True)
class RbacArgs:
    names: Names = field(default_factory=Names)
    namespace: str = DEFAULT_NAMESPACE
    slurm_bridge: bool = False  # the Slurm bridge's identity too (deploy.slurm_bridge)
    local: bool = False  # a local (kwok) cluster: the simulated provider's rights too (deploy.providers)
    pods: PodSettings = field(default_factory=PodSettings)  # the stack's pods / imagePullSecrets settings
    providers: tuple[str, ...] | None = None  # the controller's providers (None: all granted_providers)

    def __post_init__(self) -> None:
        require_namespace(self.namespace, "Rbac")


class Rbac(pulumi.ComponentResource):
    service_accounts: pulumi.Output[list[str]]

    def __init__(self, name: str, args: RbacArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:Rbac", name, None, opts)
        objs = [args.pods.customize(o) for o in rbac_objects(args.names, args.namespace, slurm_bridge=args.slurm_bridge,
                                                              local=args.local, providers=args.providers)]
        created: dict[tuple[str, str], pulumi.Resource] = {}
        for obj in objs:
            # A binding waits for its role and subject, so no request runs against a half-made grant.
            deps = [created[k] for k in _references(obj) if k in created]
            created[(obj["kind"], obj["metadata"]["name"])] = k8s_resource(
                obj, pulumi.ResourceOptions(parent=self, depends_on=deps))
        self.service_accounts = pulumi.Output.from_input(
            sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"))
        self.register_outputs({"service_accounts": self.service_accounts})


def _references(obj: dict[str, Any]) -> list[tuple[str, str]]:
    refs = []
    if "roleRef" in obj:
        refs.append((obj["roleRef"]["kind"], obj["roleRef"]["name"]))
    refs += [("ServiceAccount", s["name"]) for s in obj.get("subjects", []) if s.get("kind") == "ServiceAccount"]
    if obj["kind"] == "ValidatingAdmissionPolicyBinding":
        refs.append(("ValidatingAdmissionPolicy", obj["spec"]["policyName"]))
    return refs
