"""Session-scoped cluster for the integration suite."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.devcluster.handle import ClusterHandle


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
        yield ClusterHandle(external, local=is_local, opa_url=opa, state_dir=state)
        return
    from autoclusters.devcluster.cluster import LocalCluster

    local = LocalCluster(f"pytest-{os.getpid()}")

    def progress(msg: str) -> None:
        print(f"[cluster] {msg}", file=sys.stderr, flush=True)

    local.up(progress=progress)
    try:
        yield ClusterHandle(str(local.kubeconfig), local=True, opa_url=local.opa_url, state_dir=state)
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
