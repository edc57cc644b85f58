"""A handle on a running cluster (the local one, or any a kubeconfig names) for tests,
the demo and benchmarks: GPU nodes, service-account identities, manifests."""

from __future__ import annotations

import base64
import contextlib
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from autoclusters.kube import Conflict, Kube, load_kube
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.sim import nodes as simnodes

if TYPE_CHECKING:
    from autoclusters.devcluster.cluster import LocalCluster


class ClusterHandle:
    def __init__(self, kubeconfig: str, *, local: bool, opa_url: str | None = None,
                 names: Names | None = None, state_dir: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.local = local
        self.opa_url = opa_url
        self.names = names or Names()
        self.kube: Kube = load_kube(kubeconfig, user_agent="autoclusters-tests")
        self.host_address = "127.0.0.1"
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="autoclusters-handle-"))
        self.dev: LocalCluster | None = None  # the local cluster behind it, when this process started one

    # --- nodes ---------------------------------------------------------------------------
    def create_gpu_nodes(self, pool: str, count: int, prefix: str | None = None,
                         shape: simnodes.GpuShape = simnodes.A100_8X, wait_ready: bool = True) -> list[str]:
        created = simnodes.create_gpu_nodes(self.kube, pool, count, self.names, shape, prefix=prefix)
        if wait_ready:
            self.wait_nodes_ready(created)
        return created

    def wait_nodes_ready(self, node_names: Iterable[str], timeout: float = 60) -> None:
        pending = set(node_names)
        deadline = time.monotonic() + timeout
        while pending:
            for name in list(pending):
                node = self.kube.get_node(name)
                if node_ready(node):
                    pending.discard(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not Ready after {timeout}s: {sorted(pending)}")
            time.sleep(0.3)

    # --- identities ----------------------------------------------------------------------
    def service_account_token(self, namespace: str, name: str, node: str | None = None,
                              expiration: int = 3600) -> str:
        """A TokenRequest token of that service account (created if missing), as the kubelet
        projects into a pod. With ``node`` the token is bound to the Node object, so the API
        server adds the ``authentication.kubernetes.io/node-name`` extra to the user info."""
        with contextlib.suppress(Conflict):
            self.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": namespace}})
        with contextlib.suppress(Conflict):
            self.kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        spec: dict[str, Any] = {"expirationSeconds": expiration}
        if node:
            n = self.kube.get_node(node)
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Node", "name": node,
                                      "uid": n["metadata"]["uid"]}
        tr = self.kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(tr["status"]["token"])

    def service_account_kubeconfig(self, namespace: str, name: str, node: str | None = None,
                                   expiration: int = 3600) -> str:
        """A kubeconfig holding :meth:`service_account_token` (same arguments)."""
        token = self.service_account_token(namespace, name, node, expiration)
        cluster = self._admin_cluster()
        user = f"{namespace}-{name}" + (f"-{node}" if node else "")
        cfg = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
               "users": [{"name": user, "user": {"token": token}}],
               "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
               "current-context": user}
        path = self.state_dir / f"sa-{user}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return str(path)

    def _admin_cluster(self) -> dict[str, Any]:
        admin = yaml.safe_load(Path(self.kubeconfig).read_text())
        ctx_name = admin.get("current-context")
        ctx = next(c for c in admin["contexts"] if c["name"] == ctx_name)["context"]
        return dict(next(c for c in admin["clusters"] if c["name"] == ctx["cluster"]))

    def api_server(self) -> tuple[str, int, bytes]:
        """Host, port and CA certificate (PEM) of the API server, what a pod gets as
        ``KUBERNETES_SERVICE_HOST``/``PORT`` and the service account's ``ca.crt``."""
        cluster = self._admin_cluster()["cluster"]
        url = urlsplit(cluster["server"])
        if cluster.get("certificate-authority-data"):
            ca = base64.b64decode(cluster["certificate-authority-data"])
        else:
            ca = Path(cluster["certificate-authority"]).read_bytes()
        return str(url.hostname), int(url.port or 443), ca

    # --- manifests -------------------------------------------------------------------------
    def apply(self, objs: dict[str, Any] | Iterable[dict[str, Any]], field_manager: str = "autoclusters-tests"
              ) -> list[dict[str, Any]]:
        items = [objs] if isinstance(objs, dict) else list(objs)
        out = []
        for obj in items:
            if obj.get("kind") == "CustomResourceDefinition":
                out.append(self.kube.apply(obj, field_manager=field_manager))
                self.wait_crd_established(obj["metadata"]["name"])
                self.kube.forget_discovery()
            else:
                out.append(self.kube.apply(obj, field_manager=field_manager))
        return out

    def wait_crd_established(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = self.kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {name} not Established after {timeout}s")

