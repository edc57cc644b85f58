"""The image the controller itself runs, read from its own pod: the default image of the Jobs
its providers start (the host reboot), so that whatever changed the Deployment's image (a
kustomize ``images:`` override, a Helm value, a GitOps tool's pin) changes theirs too. A flag
the Deployment carried would be out of reach of those tools (issue 29).

The pod is found by the downward API's ``POD_NAME`` and ``POD_NAMESPACE``, which the shipped
Deployment sets; outside a pod (a controller run by hand, the tests' processes) there is none,
and ``--provider-image`` or a pool's ``provider.hostReboot.image`` names the image.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

from autoclusters.kube import Kube, KubeError

POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"


class OwnImageError(Exception):
    """The controller runs in a pod but could not read its own image; the message says why."""


def own_pod(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(namespace, name) of the pod this process runs in, from the downward API's variables;
    None outside a pod."""
    env = os.environ if env is None else env
    name, namespace = env.get(POD_NAME_ENV, ""), env.get(POD_NAMESPACE_ENV, "")
    return (namespace, name) if name and namespace else None


def own_image(kube: Kube, namespace: str, pod: str, container: str) -> str:
    """The image of ``container`` in pod ``namespace/pod`` (its spec: the reference the kubelet
    pulled, with the pod's pull secrets, which a provider Job in the same namespace can pull
    again)."""
    try:
        obj = kube.get(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}")
    except KubeError as e:
        raise OwnImageError(f"cannot read the controller's own pod {namespace}/{pod} for its image "
                            f"({e}); give --provider-image instead") from None
    for c in (obj.get("spec") or {}).get("containers") or []:
        if c.get("name") == container and c.get("image"):
            return str(c["image"])
    raise OwnImageError(f"the controller's pod {namespace}/{pod} has no container {container!r} with an image; "
                        "give --provider-image instead")
