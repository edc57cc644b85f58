"""Kubernetes objects of the system as plain dicts, defined once.

Pulumi components (``components/``), the rendered ``manifests/`` and the tests all build
their resources from these functions, so there is one source of truth per object.
"""

from autoclusters import __version__, api

DEFAULT_NAMESPACE = api.DEFAULT_NAMESPACE
CONTROLLER_SERVICE_ACCOUNT = "autoclusters-controller"
DETECTOR_SERVICE_ACCOUNT = "autoclusters-detector"
WEBHOOK_SERVICE_ACCOUNT = "autoclusters-webhook"
SLURM_BRIDGE_SERVICE_ACCOUNT = "autoclusters-slurm-bridge"

# The runtime image (Containerfile; ``make image`` builds it as an OCI archive). Its tag is
# the package version; nobody publishes it for you: push it to your registry and set the
# stack's ``autoclusters:image`` (docs/deploy.md, "The container image").
IMAGE_REPOSITORY = "ghcr.io/autoclusters/autoclusters"
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"


def cluster_scoped_name(base: str, namespace: str) -> str:
    """Cluster-scoped objects of a second installation (another namespace) get the namespace
    as a suffix, the convention of ``deploy.controller`` and ``deploy.detector``, so two
    stacks on one cluster never share, overwrite or delete each other's objects."""
    return base if namespace == DEFAULT_NAMESPACE else f"{base}-{namespace}"
