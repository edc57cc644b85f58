"""Kubernetes objects of the system as plain dicts, defined once.

Pulumi components (``components/``), the rendered ``manifests/`` and the tests all build
their resources from these functions, so there is one source of truth per object.
"""

DEFAULT_NAMESPACE = "autoclusters-system"
CONTROLLER_SERVICE_ACCOUNT = "autoclusters-controller"
DETECTOR_SERVICE_ACCOUNT = "autoclusters-detector"
WEBHOOK_SERVICE_ACCOUNT = "autoclusters-webhook"
API_VERSION = "v1alpha1"
