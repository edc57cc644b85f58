"""The lean HTTP transport of :class:`Kube`: its own HTTP/1.1 connections and orjson, no generated models.

Importing the ``kubernetes`` library loads every generated model (about 27 MB of
memory), which alone breaks the node agent's 40 MB budget, and its request path
(parameter sanitising, its REST wrapper, ``urllib3`` and ``http.client`` below) costs CPU
on every call, which the controller makes tens of thousands of. ``Kube`` needs from its
transport only ``param_serialize``/``call_api`` and a ``configuration.host``; this module
provides them over :mod:`autoclusters.kube.connection` (kept-alive HTTP/1.1 connections)
with credentials from a kubeconfig (token, token file or client certificate, CA bundle,
``tls-server-name``, ``insecure-skip-tls-verify``) or the in-cluster service account,
whose projected token it re-reads as the kubelet rotates it. Credentials it cannot serve
(exec and auth-provider plugins, basic auth, a proxy, several merged kubeconfig files)
raise :class:`NeedsFullClient`, and :func:`load_kube` then uses the ``kubernetes``
library. API errors are translated here into the named exceptions, exactly as the full
client does.
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import yaml

from autoclusters.kube.client import Kube
from autoclusters.kube.connection import TLS, Response, Server, header_lines
from autoclusters.kube.errors import KubeError, from_status

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_TOKEN_REREAD_S = 60.0


@dataclass
class _Config:
    host: str
    ca_file: str | None = None
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    server_name: str | None = None  # tls-server-name: the name the server's certificate is checked against


class NeedsFullClient(KubeError):
    """Credentials only the ``kubernetes`` library serves (exec/auth-provider plugins, basic auth, a proxy)."""


class _Response:
    """The subset of the kubernetes client's response that ``Kube`` reads."""

    def __init__(self, resp: Response) -> None:
        self.response = resp.body  # a streamed body: stream(), release_conn()
        self.status = resp.status
        self.reason = resp.reason
        self.data: bytes = resp.data

    def read(self) -> bytes:
        return self.data


class LightApiClient:
    def __init__(self, cfg: _Config, pool_size: int = 8) -> None:
        self.configuration = cfg
        self.user_agent = "autoclusters"
        self._server = Server(cfg.host, pool_size=pool_size,
                              tls=TLS(ca_file=cfg.ca_file, verify=cfg.verify, cert_file=cfg.cert_file,
                                      key_file=cfg.key_file, server_name=cfg.server_name))
        self._origin = f"{self._server.scheme}://{self._server.host_header}{self._server.prefix}"
        self._token = cfg.token
        self._token_read = 0.0
        self._lines: tuple[tuple[str, str | None], bytes, bytes] | None = None  # (user agent, token), encoded

    def _header_lines(self, with_body: bool) -> bytes:
        """Accept, User-Agent, Authorization (and Content-Type: JSON): encoded once per user agent
        and token, not on every request."""
        token = self._bearer()
        lines = self._lines
        if lines is None or lines[0] != (self.user_agent, token):
            fixed = {"Accept": "application/json", "User-Agent": self.user_agent}
            if token:
                fixed["Authorization"] = f"Bearer {token}"
            plain = header_lines(fixed)
            lines = self._lines = ((self.user_agent, token), plain, plain + b"Content-Type: application/json\r\n")
        return lines[2] if with_body else lines[1]

    def _bearer(self) -> str | None:
        cfg = self.configuration
        if cfg.token_file and time.monotonic() - self._token_read > _TOKEN_REREAD_S:
            try:
                self._token = Path(cfg.token_file).read_text().strip()
                self._token_read = time.monotonic()
            except OSError as e:
                raise KubeError(f"cannot read the service account token {cfg.token_file}: {e}") from e
        return self._token

    def param_serialize(self, *, method: str, resource_path: str, query_params: list[tuple[str, Any]] | None,
                        header_params: dict[str, str], body: Any, auth_settings: list[str]
                        ) -> tuple[str, str, dict[str, str], bytes | None, None]:
        url = self._origin + resource_path
        if query_params:
            url += "?" + urlencode(query_params)
        headers = {**header_params, "User-Agent": self.user_agent}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        payload = None if body is None else orjson.dumps(body)
        return method, url, headers, payload, None

    takes_stream = True  # Kube.request says when it wants the body as a stream

    def send(self, method: str, path: str, query: list[tuple[str, Any]] | None, body: Any, content_type: str | None,
             timeout: float | tuple[float, float], stream: bool) -> Response:
        """``Kube.request``'s own path: the API path and query as given, the fixed headers encoded
        once; an answer of 300 or more raises its named error (the body read whole)."""
        if query:
            path += "?" + urlencode(query)
        payload = None if body is None else orjson.dumps(body)
        if not content_type or content_type == "application/json":
            lines = self._header_lines(payload is not None or bool(content_type))
        else:
            lines = self._header_lines(False) + f"Content-Type: {content_type}\r\n".encode("latin-1")
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        resp = self._server.request(method.upper(), path, headers=lines, body=payload, connect_timeout=connect,
                                    read_timeout=read, stream=stream)
        if resp.status >= 300:
            _raise_for(resp)
        return resp

    def call_api(self, method: str, url: str, *, header_params: dict[str, str], body: bytes | None,
                 _request_timeout: float | tuple[float, float] = 30, stream: bool | None = None) -> _Response:
        """``stream``: the body is read by the caller (``response.stream()``); by default only a watch's."""
        connect, read = _request_timeout if isinstance(_request_timeout, tuple) else (_request_timeout,) * 2
        path = url[len(self._origin):] if url.startswith(self._origin) else url
        if stream is None:
            stream = "watch=true" in path
        resp = self._server.request(method, path, headers=header_params, body=body, connect_timeout=connect,
                                    read_timeout=read, stream=stream)
        if resp.status >= 300:
            _raise_for(resp)
        return _Response(resp)


def _raise_for(resp: Response) -> None:
    """The named error of an answer with a status of 300 or more, its body read whole."""
    data = resp.body.read_all() if resp.body is not None else resp.data
    raise from_status(resp.status, resp.reason or "", data, resp.headers.get("retry-after"))


def _materialise(data: str | None, path: str | None, base: Path, tmp: Path, name: str) -> str | None:
    """A file path for a kubeconfig ``*-data`` (base64) or file entry."""
    if data:
        out = tmp / name
        out.write_bytes(base64.b64decode(data))
        out.chmod(0o600)
        return str(out)
    if path:
        return str(path if os.path.isabs(path) else base / path)
    return None


def _from_kubeconfig(path: str) -> _Config:
    base = Path(path).resolve().parent
    doc = yaml.safe_load(Path(path).read_text()) or {}
    ctx_name = doc.get("current-context")
    ctx = next((c["context"] for c in doc.get("contexts") or [] if c.get("name") == ctx_name), None)
    if ctx is None:
        raise KubeError(f"{path}: no current context")
    cluster = next((c["cluster"] for c in doc.get("clusters") or [] if c.get("name") == ctx.get("cluster")), None)
    user = next((u.get("user") or {} for u in doc.get("users") or [] if u.get("name") == ctx.get("user")), {})
    if cluster is None:
        raise KubeError(f"{path}: context {ctx_name} names no known cluster")
    if "exec" in user or "auth-provider" in user:
        raise NeedsFullClient(f"{path}: exec/auth-provider credentials need the full client (load_kube)")
    if "username" in user or "proxy-url" in cluster:
        raise NeedsFullClient(f"{path}: basic auth or a proxy needs the full client (load_kube)")
    tmp = Path(tempfile.mkdtemp(prefix="autoclusters-kube-"))
    return _Config(
        host=cluster["server"],
        ca_file=_materialise(cluster.get("certificate-authority-data"), cluster.get("certificate-authority"), base,
                             tmp, "ca.crt"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        cert_file=_materialise(user.get("client-certificate-data"), user.get("client-certificate"), base, tmp,
                               "client.crt"),
        key_file=_materialise(user.get("client-key-data"), user.get("client-key"), base, tmp, "client.key"),
        token=user.get("token"),
        token_file=user.get("tokenFile"),
        server_name=cluster.get("tls-server-name"),
    )


def load_light_kube(kubeconfig: str | None = None, *, user_agent: str = "autoclusters", qps_pool: int = 8) -> Kube:
    """Like :func:`load_kube` (kubeconfig path, ``$KUBECONFIG``, in-cluster, ``~/.kube/config``), without
    importing the ``kubernetes`` library; ``qps_pool`` connections are kept open for concurrent calls."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path:
            files = [p for p in path.split(os.pathsep) if p]
            if len(files) > 1:
                raise NeedsFullClient(f"{path}: several kubeconfig files are merged by the full client (load_kube)")
            cfg = _from_kubeconfig(files[0])
        elif os.path.exists(f"{SA_DIR}/token") and os.environ.get("KUBERNETES_SERVICE_HOST"):
            host = os.environ["KUBERNETES_SERVICE_HOST"]
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            host = f"[{host}]" if ":" in host else host
            cfg = _Config(host=f"https://{host}:{port}", ca_file=f"{SA_DIR}/ca.crt", token_file=f"{SA_DIR}/token")
        else:
            cfg = _from_kubeconfig(str(Path.home() / ".kube" / "config"))
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        raise KubeError(f"cannot load Kubernetes credentials ({path or 'default'}): {e}") from e
    return Kube(LightApiClient(cfg, pool_size=qps_pool), user_agent=user_agent)
