"""A client for a kubeconfig path, ``$KUBECONFIG`` or the in-cluster service account: the lean
transport (:mod:`autoclusters.kube.light`) where it serves the credential, the ``kubernetes``
library's ApiClient where it does not."""

from __future__ import annotations

import os
import tempfile

from autoclusters.kube.client import Kube
from autoclusters.kube.errors import KubeError
from autoclusters.kube.light import NeedsFullClient, load_light_kube


def load_kube(kubeconfig: str | None = None, *, user_agent: str = "autoclusters", qps_pool: int = 32) -> Kube:
    """A client from a kubeconfig path, ``$KUBECONFIG``, or the in-cluster service account.

    The lean transport (:mod:`autoclusters.kube.light`) serves every credential it can (tokens,
    token files, client certificates, the in-cluster account); the ``kubernetes`` library serves
    the rest (exec and auth-provider plugins, basic auth, proxies named by the kubeconfig or by
    the environment's ``HTTPS_PROXY``/``HTTP_PROXY`` for the API server's address, merged
    kubeconfig files)."""
    try:
        kube = load_light_kube(kubeconfig, user_agent=user_agent, qps_pool=qps_pool)
    except NeedsFullClient:
        return load_full_kube(kubeconfig, user_agent=user_agent, qps_pool=qps_pool)
    if env_proxy_for(kube.host):  # the lean transport talks to the API server directly, never through a proxy
        return load_full_kube(kubeconfig, user_agent=user_agent, qps_pool=qps_pool)
    return kube


def load_kube_text(text: str, *, user_agent: str = "autoclusters", qps_pool: int = 8) -> Kube:
    """A client from a kubeconfig's contents (a Secret's, say), as :func:`load_kube` builds one
    from a file: the text goes to a private temporary file for the loaders (both read the file
    at once, and copy its ``*-data`` entries into files of their own), removed again before
    this returns. A kubeconfig that names files resolves them against the temporary directory."""
    fd, path = tempfile.mkstemp(prefix="autoclusters-kubeconfig-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return load_kube(path, user_agent=user_agent, qps_pool=qps_pool)
    finally:
        os.unlink(path)


def env_proxy_for(host: str) -> str | None:
    """The proxy the environment names for an API server URL (``HTTPS_PROXY`` and the like, less
    ``NO_PROXY``), which kubectl and the ``kubernetes`` library both honour; None for none."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(host)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.netloc):  # NO_PROXY (on Linux: the environment only)
        return None
    return proxy


def load_full_kube(kubeconfig: str | None = None, *, user_agent: str = "autoclusters", qps_pool: int = 32) -> Kube:
    """A client over the ``kubernetes`` library's ApiClient (any credential its config loader reads)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=cfg)
        elif os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(client_configuration=cfg)
    except Exception as e:
        raise KubeError(f"cannot load Kubernetes credentials ({path or 'default'}): {e}") from e
    cfg.connection_pool_maxsize = qps_pool
    return Kube(client.ApiClient(cfg), user_agent=user_agent)
