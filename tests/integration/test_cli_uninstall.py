"""``autoclusters uninstall`` against the local API server, the path for what ``manifests/`` created:
it refuses while a controller holds its Lease, ``--dry-run`` changes nothing, a run removes every
mark and exits 1 with a LEFT line for the cordon of a reset under way, and once that cordon is
lifted as the line says, a last run finds nothing and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.ops.uninstall import marks_of
from tests.integration.controller_support import Env, controller_env

pytestmark = pytest.mark.integration


def _uninstall(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "uninstall", "--kubeconfig",
                           env.cluster.kubeconfig, "--namespace", env.namespace, *args],
                          env=env.process_env(), capture_output=True, text=True, timeout=120, check=False)


def _marks(env: Env, node: str) -> list[str]:
    return marks_of(env.names, env.kube.get_node(node))


def test_uninstall_refuses_while_the_controller_runs_then_cleans_and_names_what_it_left(
        cluster: ClusterHandle, tmp_path: Path) -> None:
    if not cluster.local:
        pytest.skip("the simulated provider's resets need the local (kwok) cluster")
    with controller_env(cluster, tmp_path / "logs", owner="uni") as env:
        _, [slow] = env.pool("auto", 1, provider={"type": "simulated", "simulated": {"resetSeconds": 600}})
        _, [held] = env.pool("propose", 1)
        env.raise_fault(slow)
        env.raise_fault(held)
        env.record_in(slow, "Acting", timeout=60)
        env.record_in(held, "AwaitingApproval", timeout=60)
        assert env.kube.get_node(slow)["spec"].get("unschedulable") and _marks(env, slow) and _marks(env, held)

        refused = _uninstall(env, "--wait", "0")
        assert refused.returncode == 1 and "holds Lease" in refused.stderr, refused.stderr
        assert _marks(env, held)

        for c in env.controllers:
            c.terminate()
        before = {n: env.kube.get_node(n) for n in (slow, held)}
        dry = _uninstall(env, "--dry-run")
        assert dry.returncode == 1, dry.stderr
        assert f"node {held}: would remove label {env.names.maintenance_required}" in dry.stdout, dry.stdout
        assert {n: env.kube.get_node(n)["metadata"]["resourceVersion"] for n in before} == \
            {n: o["metadata"]["resourceVersion"] for n, o in before.items()}

        done = _uninstall(env)
        assert done.returncode == 1, done.stderr
        [left] = [line for line in done.stdout.splitlines() if line.startswith("LEFT ")]
        assert left.startswith(f"LEFT node {slow}: the cordon: its reset") and f"kubectl uncordon {slow}" in left
        assert _marks(env, slow) == [] and _marks(env, held) == []
        assert env.kube.get_node(slow)["spec"].get("unschedulable") is True
        assert not env.kube.get_node(held)["spec"].get("unschedulable")

        env.kube.patch_node(slow, {"spec": {"unschedulable": None}})  # what the LEFT line says to run
        last = _uninstall(env)
        assert last.returncode == 0 and "no marks of autoclusters" in last.stdout, last.stdout + last.stderr
        for node in (slow, held):
            env.kube.delete(f"/api/v1/nodes/{node}")
