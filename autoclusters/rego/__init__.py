"""The Python side of the Rego policies (``policies/``): what they are told, the OPA binary, GitOps checks.

``policy_data`` says what the policies need to know (domain, controller identities);
``opa`` finds and runs the OPA binary; ``documents`` reads manifests; ``check`` turns
manifests into findings. The webhook and ``autoclusters policy check`` both build on it.
"""

from autoclusters.rego.check import Finding, check_documents
from autoclusters.rego.documents import Document, InputError, read_paths
from autoclusters.rego.policy_data import PolicyConfig

__all__ = ["Document", "Finding", "InputError", "PolicyConfig", "check_documents", "read_paths"]
