"""Session-scoped cluster for the integration suite."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autoclusters.deploy.kubernetes_version import too_old
from autoclusters.devcluster.handle import ClusterHandle
from tests.integration.controller_support import Env, controller_env


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    state = tmp_path_factory.mktemp("cluster-handle")
    external = os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG")
    if external:
        dev_opa = _local_opa_url(external)
        opa = os.environ.get("AUTOCLUSTERS_TEST_OPA_URL") or dev_opa
        # "local": the API server runs on this machine and reaches webhooks on 127.0.0.1.
        is_local = dev_opa is not None or os.environ.get("AUTOCLUSTERS_TEST_LOCAL") == "1"
        handle = ClusterHandle(external, local=is_local, opa_url=opa, state_dir=state)
        why = too_old(handle.kube.get("/version"))
        if why:  # every test would fail at the first kind it needs; say why once instead
            pytest.exit(f"AUTOCLUSTERS_TEST_KUBECONFIG={external}: {why}", returncode=pytest.ExitCode.USAGE_ERROR)
        yield handle
        return
    from autoclusters.devcluster.cluster import LocalCluster

    local = LocalCluster(f"pytest-{os.getpid()}")

    def progress(msg: str) -> None:
        print(f"[cluster] {msg}", file=sys.stderr, flush=True)

    local.up(progress=progress)
    try:
        handle = ClusterHandle(str(local.kubeconfig), local=True, opa_url=local.opa_url, state_dir=state)
        handle.dev = local  # optional components (Karpenter) start on it when a test asks for them
        yield handle
    finally:
        local.down(progress=progress)


@pytest.fixture(scope="session")
def karpenter(cluster: ClusterHandle) -> ClusterHandle:
    """Karpenter with its kwok cloud provider on the cluster: started on the local cluster the
    first time a test asks; on a cluster a kubeconfig names, Karpenter must already run there
    (its NodeClaim API served and a KWOKNodeClass named ``default``)."""
    from autoclusters.devcluster import local_karpenter as kp
    from autoclusters.devcluster.tools import ToolsMissing
    from autoclusters.kube import KubeError
    from tests.conftest import tool_missing

    if cluster.dev is not None:
        def progress(msg: str) -> None:
            print(f"[cluster] {msg}", file=sys.stderr, flush=True)

        try:
            cluster.dev.start_karpenter(progress=progress)
        except ToolsMissing as e:
            tool_missing(str(e))
        return cluster
    try:
        cluster.kube.get(f"/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses/{kp.NODE_CLASS}")
    except KubeError as e:
        pytest.skip(f"needs Karpenter's kwok provider on the cluster (KWOKNodeClass {kp.NODE_CLASS}): {e}")
    return cluster


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A local cluster of its own with two real nodes (kubelet, containerd, kube-proxy: see
    devcluster/realnodes.py) beside the kwok ones, started the first time a test asks. Its tests
    reboot nodes through the shipped reboot Job, so they run only where the nodes are this
    suite's own: never on a cluster a kubeconfig names."""
    if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
        pytest.skip("the real-node tests reboot nodes: they run on the local cluster's own real nodes only "
                    "(make test), never on a cluster AUTOCLUSTERS_TEST_KUBECONFIG names")
    from autoclusters.devcluster.cluster import LocalCluster
    from autoclusters.devcluster.realnodes import RealNodesMissing
    from tests.conftest import tool_missing

    local = LocalCluster(f"pytest-real-{os.getpid()}")

    def progress(msg: str) -> None:
        print(f"[real-cluster] {msg}", file=sys.stderr, flush=True)

    try:
        local.up(progress=progress, real_nodes=2)
    except RealNodesMissing as e:
        tool_missing(str(e))
    try:
        handle = ClusterHandle(str(local.kubeconfig), local=True, opa_url=local.opa_url,
                               state_dir=tmp_path_factory.mktemp("real-cluster-handle"))
        handle.dev = local
        yield handle
    finally:
        local.down(progress=progress)


def _local_opa_url(kubeconfig: str) -> str | None:
    """The OPA server of a ``dev up`` cluster whose kubeconfig this is, if any."""
    from autoclusters.devcluster.cluster import LocalCluster

    path = Path(kubeconfig).resolve()
    if path.name == "kubeconfig":
        c = LocalCluster(path.parent.name, root=path.parent.parent)
        if c.is_running():
            return c.opa_url
    return None


@pytest.fixture()
def unique() -> str:
    """A short random suffix for names that must not collide across tests."""
    return secrets.token_hex(3)


@pytest.fixture(scope="session")
def kube(cluster: ClusterHandle):
    return cluster.kube


@pytest.fixture(scope="session")
def ctl(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One environment (one lease, one controller under its own identity) for the whole session:
    two would be two leaders acting on the same pools. Logs go to
    $AUTOCLUSTERS_TEST_CONTROLLER_LOGS when set."""
    wanted = os.environ.get("AUTOCLUSTERS_TEST_CONTROLLER_LOGS")
    with controller_env(cluster, Path(wanted) if wanted else tmp_path_factory.mktemp("controller-logs")) as env:
        yield env


@pytest.fixture()
def controller_log(ctl: Env) -> Callable[[], str]:
    return lambda: "\n".join(c.log()[-4000:] for c in ctl.controllers)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The ``helm`` that ``tools/build-tools.sh helm`` built (the chart's tests)."""
    from autoclusters.devcluster.tools import ToolsMissing
    from autoclusters.devcluster.tools import helm as helm_binary
    from tests.conftest import tool_missing

    try:
        return helm_binary()
    except ToolsMissing as e:
        tool_missing(str(e))
