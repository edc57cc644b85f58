"""Writing the webhook's CA bundle where the API server reads it.

Called when the certificate manager generated a new CA: patches the caBundle of every
webhook in the named ValidatingWebhookConfiguration (a JSON patch of just those fields).
"""

from __future__ import annotations

import logging

from autoclusters.deploy.admission import ca_bundle_patch
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.client import JSON_PATCH

log = logging.getLogger(__name__)

PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"


def write_ca_bundle(kube: Kube, config_name: str, ca_bundle: bytes) -> bool:
    """True when the configuration exists and now carries ``ca_bundle``."""
    try:
        current = kube.get(PATH + config_name)
    except NotFound:
        log.warning("webhook configuration %s does not exist yet; its caBundle will be set when it is applied",
                    config_name)
        return False
    patch = [op for op in ca_bundle_patch(current, ca_bundle)
             if _get(current, op["path"]) != op["value"]]
    if patch:
        kube.patch(PATH + config_name, patch, JSON_PATCH)
        log.info("wrote the CA bundle into %s (%d webhooks)", config_name, len(patch))
    return True


def _get(obj: dict, pointer: str) -> object:
    """The value at a JSON pointer such as ``/webhooks/0/clientConfig/caBundle`` (None if absent)."""
    cur: object = obj
    for part in pointer.strip("/").split("/"):
        if isinstance(cur, list):
            cur = cur[int(part)] if int(part) < len(cur) else None
        elif isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
    return cur
