"""Where the upstream binaries built by ``tools/build-tools.sh`` live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class ToolsMissing(RuntimeError):
    """A binary the local cluster needs has not been built yet."""


def repo_root() -> Path:
    """The checkout this package runs from (it holds ``tools/`` and ``policies/``)."""
    env = os.environ.get("AUTOCLUSTERS_REPO")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "tools" / "versions.env").exists():
            return parent
    raise ToolsMissing("cannot find the autoclusters checkout (tools/versions.env); set AUTOCLUSTERS_REPO")


def cache_dir() -> Path:
    return Path(os.environ.get("AUTOCLUSTERS_CACHE", Path.home() / ".cache" / "autoclusters"))


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (repo_root() / "tools" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Tools:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    opa: Path
    kube_version: str

    @classmethod
    def locate(cls) -> Tools:
        v = versions()
        bin_dir = cache_dir() / "bin"

        def tool(name: str, version_key: str) -> Path:
            d = bin_dir / f"{name}-{v[version_key]}"
            if not (d / ".complete").exists():
                raise ToolsMissing(
                    f"{name} {v[version_key]} is not built yet (expected in {d}); run: tools/build-tools.sh core")
            return d

        kube = tool("kube", "KUBE_VERSION")
        kwok = tool("kwok", "KWOK_VERSION")
        return cls(
            etcd=tool("etcd", "ETCD_VERSION") / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kwok=kwok / "kwok",
            kwok_stages=kwok / "stages",
            opa=tool("opa", "OPA_VERSION") / "opa",
            kube_version=v["KUBE_VERSION"],
        )


def opa_binary() -> Path:
    """The OPA binary alone (for ``policy check`` and policy tests)."""
    v = versions()["OPA_VERSION"]
    path = cache_dir() / "bin" / f"opa-{v}" / "opa"
    if not path.exists():
        raise ToolsMissing(f"opa {v} is not built yet (expected {path}); run: tools/build-tools.sh core")
    return path


@dataclass(frozen=True)
class KarpenterTools:
    binary: Path
    crds: Path  # the CRDs of the same module: NodePools, NodeClaims, KWOKNodeClasses, ...
    version: str


def _built(name: str, version_key: str, set_name: str) -> Path:
    v = versions()[version_key]
    d = cache_dir() / "bin" / f"{name}-{v}"
    if not (d / ".complete").exists():
        raise ToolsMissing(f"{name} {v} is not built yet (expected in {d}); run: tools/build-tools.sh {set_name}")
    return d


def karpenter_tools() -> KarpenterTools:
    """Karpenter's kwok cloud provider and its CRDs (``tools/build-tools.sh karpenter``)."""
    d = _built("karpenter", "KARPENTER_VERSION", "karpenter")
    return KarpenterTools(binary=d / "karpenter", crds=d / "crds", version=versions()["KARPENTER_VERSION"])


def cluster_api_crds() -> Path:
    """The directory of Cluster API's CRDs (``tools/build-tools.sh cluster-api``)."""
    return _built("cluster-api", "CLUSTER_API_VERSION", "cluster-api") / "crds"


def promtool() -> Path:
    """Prometheus's ``promtool`` (``tools/build-tools.sh monitoring``): checks the alert rules."""
    return _built("promtool", "PROMETHEUS_VERSION", "monitoring") / "promtool"


def prometheus() -> Path:
    """The Prometheus server (``tools/build-tools.sh monitoring``): a test scrapes the controller
    with it and evaluates the shipped alerts."""
    return _built("prometheus", "PROMETHEUS_VERSION", "monitoring") / "prometheus"


def helm() -> Path:
    """Helm's CLI (``tools/build-tools.sh helm``): the chart's tests template, install, upgrade and
    uninstall ``charts/autoclusters`` with it."""
    return _built("helm", "HELM_VERSION", "helm") / "helm"


def prometheus_operator_crds() -> Path:
    """The directory of the Prometheus Operator's PodMonitor and PrometheusRule CRDs
    (``tools/build-tools.sh monitoring``)."""
    return _built("prometheus-operator", "PROMETHEUS_OPERATOR_VERSION", "monitoring") / "crds"
