"""``autoclusters pool set-mode`` against a real API server."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.names import Names
from autoclusters.ops.resources import pools_path
from tests.integration.ops_support import cli, create_pool, private_domain


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3)) as n:
        yield n


def test_set_mode_changes_only_the_consent_mode(cluster: ClusterHandle, names: Names, unique: str) -> None:
    flags = ["--domain", names.domain, "--condition-prefix", names.prefix]
    pool = f"pm-{unique}"
    create_pool(cluster.kube, names, pool, "auto")
    before = cluster.kube.get(pools_path(names, pool))["spec"]

    dry = cli(cluster.kubeconfig, "pool", "set-mode", pool, "propose", "--dry-run", "-o", "json", *flags)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {"pool": pool, "from": "auto", "to": "propose", "changed": True, "dryRun": True}
    assert cluster.kube.get(pools_path(names, pool))["spec"]["consentMode"] == "auto"

    res = cli(cluster.kubeconfig, "pool", "set-mode", pool, "propose", *flags)
    assert res.returncode == 0, res.stderr
    assert f"pool {pool}: consent mode changed from auto to propose" in res.stdout
    after = cluster.kube.get(pools_path(names, pool))["spec"]
    assert after == dict(before, consentMode="propose")

    same = cli(cluster.kubeconfig, "pool", "set-mode", pool, "propose", *flags)
    assert same.returncode == 0 and "already propose" in same.stdout

    status = json.loads(cli(cluster.kubeconfig, "status", "-o", "json", "--pool", pool, *flags).stdout)
    assert status["pools"][0]["consentMode"] == "propose"


def test_set_mode_errors(cluster: ClusterHandle, names: Names, unique: str) -> None:
    flags = ["--domain", names.domain, "--condition-prefix", names.prefix]
    missing = cli(cluster.kubeconfig, "pool", "set-mode", f"nope-{unique}", "off", *flags)
    assert missing.returncode == 1 and f"no GpuNodePool 'nope-{unique}'" in missing.stderr
    bad = cli(cluster.kubeconfig, "pool", "set-mode", f"nope-{unique}", "sometimes", *flags)
    assert bad.returncode == 2
