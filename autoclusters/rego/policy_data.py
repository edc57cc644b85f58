"""What the Rego policies are told about this installation.

The policies carry defaults equal to ``Names()`` and the default controller identity;
this data document (``data.autoclusters.config``) overrides them for another domain
or namespace, so one policy bundle serves every installation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE, admission
from autoclusters.names import Names


def controller_identity(namespace: str = DEFAULT_NAMESPACE, service_account: str = CONTROLLER_SERVICE_ACCOUNT) -> str:
    """The username the API server gives the controller's service-account tokens."""
    return f"system:serviceaccount:{namespace}:{service_account}"


@dataclass(frozen=True)
class PolicyConfig:
    names: Names = field(default_factory=Names)
    controllers: tuple[str, ...] = (controller_identity(),)
    node_agents: tuple[str, ...] = tuple(admission.default_node_agents())
    allow_lists: AllowLists = NO_ENTRIES  # the operator's: what the pool rules let a pool name

    def data_document(self) -> dict[str, Any]:
        """The document to load into OPA at the root (``opa eval -d``, ``opa run``)."""
        return admission.policy_data_document(self.names, list(self.controllers), list(self.node_agents),
                                              self.allow_lists)

    def config(self) -> dict[str, Any]:
        """The value of ``data.autoclusters.config`` (what the webhook pushes to OPA)."""
        return admission.policy_config(self.names, list(self.controllers), list(self.node_agents), self.allow_lists)
