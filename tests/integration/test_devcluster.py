"""`autoclusters dev up` / `dev down` work twice in a row and leave nothing running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoclusters.devcluster import processes
from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.devcluster.tools import Tools, ToolsMissing


def _local_binaries() -> None:
    """These tests start clusters of their own: the local control-plane binaries must exist.
    Against a cluster a kubeconfig names (no binaries there) they are skipped, with the reason."""
    try:
        Tools.locate()
    except ToolsMissing as e:
        if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
            pytest.skip(f"local control-plane binaries not built on this machine: {e}")
        raise


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def _our_pids(binaries: list[str]) -> list[int]:
    """Processes still running one of the control-plane binaries from this state dir."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].decode(errors="replace") in binaries:
            found.append(int(d.name))
    return found


def test_dev_up_down_twice_leaves_nothing_running(tmp_path: Path) -> None:
    _local_binaries()
    env = {**os.environ, "AUTOCLUSTERS_STATE_DIR": str(tmp_path)}
    try:
        _up_down_twice(tmp_path, env)
    finally:  # a failed assertion must not leave a control plane running on the machine
        if (tmp_path / "twice").exists():
            _cli("dev", "down", "--name", "twice", env=env)


def _up_down_twice(tmp_path: Path, env: dict[str, str]) -> None:
    for round_ in range(2):
        up = _cli("dev", "up", "--name", "twice", "--pool", "p", "--nodes", "1", env=env)
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1]
        assert Path(kubeconfig).exists()
        assert "Ready: p-0" in up.stderr
        status = _cli("dev", "status", "--name", "twice", "-o", "json", env=env)
        assert status.returncode == 0, status.stdout
        components = {c["component"]: c for c in json.loads(status.stdout)["components"]}
        assert set(components) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
                                   "sim-hosts", "opa"}
        assert all(c["running"] for c in components.values())
        procs = LocalCluster("twice", root=tmp_path).procs()
        binaries = [p.binary for p in procs]
        pids = {p.pid for p in procs}
        # A second `up` while running is a no-op, not a second set of processes.
        again = _cli("dev", "up", "--name", "twice", env=env)
        assert again.returncode == 0 and "already running" in again.stderr
        down = _cli("dev", "down", "--name", "twice", env=env)
        assert down.returncode == 0, down.stderr
        assert not (tmp_path / "twice").exists(), f"round {round_}: state left behind"
        left = [pid for pid in _our_pids(binaries) if pid in pids]
        assert not left, f"round {round_}: processes left running: {left}"
        assert not any(processes.alive(p) for p in procs)
    status = _cli("dev", "status", "--name", "twice", env=env)
    assert status.returncode == 1


def test_dev_up_with_slurm_mirrors_the_pool_and_down_stops_everything(tmp_path: Path) -> None:
    from autoclusters.devcluster.slurm import SlurmMissing, locate
    from tests.conftest import tool_missing

    try:
        Tools.locate()
        locate()
    except (ToolsMissing, SlurmMissing) as e:
        if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
            pytest.skip(f"the local cluster's binaries or Slurm are not on this machine: {e}")
        tool_missing(str(e))
    env = {**os.environ, "AUTOCLUSTERS_STATE_DIR": str(tmp_path)}
    up = _cli("dev", "up", "--name", "slurm", "--pool", "a100", "--nodes", "2", "--slurm", env=env)
    try:
        assert up.returncode == 0, up.stderr
        cluster = LocalCluster("slurm", root=tmp_path)
        slurm_env = {**env, **cluster.slurm.env()}
        assert f"SLURM_CONF={cluster.slurm.conf}" in up.stderr
        sinfo = subprocess.run(["sinfo", "-h", "-N", "-O", "NodeList:|,StateComplete:|,Partition:"], env=slurm_env,
                               capture_output=True, text=True, timeout=30, check=True).stdout
        assert sorted(line.split("|")[0] for line in sinfo.splitlines()) == ["a100-0", "a100-1"]
        assert all(line.split("|")[1] == "idle" for line in sinfo.splitlines()), sinfo
        status = json.loads(_cli("dev", "status", "--name", "slurm", "-o", "json", env=env).stdout)
        names = {c["component"] for c in status["components"]}
        assert {"munged", "slurmctld", "slurmd-a100-0", "slurmd-a100-1"} <= names
        logs = Path(cluster.logs)
        assert (logs / "slurmctld.log").exists() and (logs / "slurmd-a100-0.log").exists()
        # A running job is cancelled by `dev down`, and no Slurm process is left.
        job = subprocess.run(["sbatch", "--parsable", "-N2", "--wrap", "sleep 600"], env=slurm_env,
                             capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        assert job
        slurm_procs = cluster.slurm_procs()
    finally:
        down = _cli("dev", "down", "--name", "slurm", env=env)
    assert down.returncode == 0, down.stderr
    assert not any(processes.alive(p) for p in slurm_procs)
    assert not (tmp_path / "slurm").exists()


def test_simulated_nodes_renew_their_lease_and_post_status_as_rarely_as_a_kubelet(tmp_path: Path) -> None:
    """With a status report interval far beyond the test, a node stays Ready past the
    controller-manager's grace period on its Lease renewals alone, and posts no status."""
    from autoclusters.devcluster.handle import ClusterHandle
    from autoclusters.devcluster.heartbeats import Heartbeats
    from autoclusters.kube.objects import node_ready

    _local_binaries()
    heartbeats = Heartbeats(lease_seconds=8, status_seconds=600)  # renewed every 2 s, grace 18 s
    cluster = LocalCluster("beats", root=tmp_path)
    cluster.up(heartbeats=heartbeats)
    try:
        kcm = next(p for p in cluster.procs() if p.name == "kube-controller-manager")
        argv = Path(f"/proc/{kcm.pid}/cmdline").read_bytes().decode().split("\0")
        assert f"--node-monitor-grace-period={heartbeats.grace_seconds}s" in argv
        handle = ClusterHandle(str(cluster.kubeconfig), local=True, state_dir=tmp_path / "handle")
        [node] = handle.create_gpu_nodes("beats", 1)
        lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"

        def ready_heartbeat() -> str:
            n = handle.kube.get_node(node)
            assert node_ready(n), n["status"]["conditions"]
            return next(c["lastHeartbeatTime"] for c in n["status"]["conditions"] if c["type"] == "Ready")

        posted = ready_heartbeat()
        renewals = set()
        deadline = time.monotonic() + heartbeats.grace_seconds + 3 * heartbeats.renew_seconds
        while time.monotonic() < deadline:
            renewals.add(handle.kube.get(lease)["spec"]["renewTime"])
            assert ready_heartbeat() == posted, "the node posted its status before its report interval"
            time.sleep(0.5)
        # 24 s at one renewal every 2 s; a busy machine may delay some
        assert len(renewals) >= 6, sorted(renewals)
        assert handle.kube.get(lease)["spec"]["leaseDurationSeconds"] == heartbeats.lease_seconds
    finally:
        cluster.down()
