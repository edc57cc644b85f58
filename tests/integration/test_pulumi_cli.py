"""``pulumi up`` the way the README and docs/deploy.md tell a user: the Pulumi CLI in (a copy
of) the repository, through ``Pulumi.yaml`` and ``__main__.py``, with the virtualenv
activated, a local file backend from ``pulumi login``, the stack configured with
``pulumi config set``; then a preview that must show no change, a consent-mode change
through ``pulumi config set`` + ``pulumi up``, and ``pulumi destroy``.

The CLI, the Python language host and the Kubernetes provider are the ones
``tools/build-tools.sh`` builds (``pulumi``, ``pulumi-python``), found on ``PATH``
(autoclusters.devcluster.pulumi_env.cli_env). The stack gets its own domain and namespace
(tests/integration/test_pulumi_up.py's StackRun), and the webhook it configures runs on this
host under the stack's service account, as in the local mode.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.tools import ToolsMissing
from tests.integration.helpers import wait_for
from tests.integration.test_pulumi_up import StackRun

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
_NOT_COPIED = shutil.ignore_patterns(".venv", "build", ".git", "__pycache__", ".pulumi-state", ".pytest_cache",
                                     ".ruff_cache", "*.egg-info", "Pulumi.*.yaml")


class Project:
    """A copy of the repository and a shell in it: ``pulumi ...`` runs there."""

    def __init__(self, tmp: Path) -> None:
        from autoclusters.devcluster import pulumi_env

        self.dir = tmp / "autoclusters"
        shutil.copytree(REPO, self.dir, ignore=_NOT_COPIED)
        venv = Path(sys.prefix)
        (self.dir / ".venv").symlink_to(venv)  # what `make venv` makes; Pulumi.yaml names it
        self.env = pulumi_env.cli_env(tmp / "pulumi-home", venv)
        self.log = tmp / "pulumi.log"

    def pulumi(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        res = subprocess.run(["pulumi", *args, "--non-interactive"], cwd=self.dir, env=self.env,
                             capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        with self.log.open("a") as f:
            f.write(f"$ pulumi {' '.join(args)}  # rc {res.returncode}, {time.monotonic() - start:.1f}s\n"
                    f"{res.stdout}{res.stderr}\n")
        if check and res.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} failed ({res.returncode}):\n"
                                 f"{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
        return res

    def timed(self, *args: str) -> float:
        start = time.monotonic()
        self.pulumi(*args)
        return time.monotonic() - start

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.pulumi("stack", "output", "--json").stdout)


@pytest.fixture()
def project(cluster: ClusterHandle, tmp_path: Path, unique: str) -> Iterator[tuple[Project, StackRun]]:
    if not cluster.local:
        pytest.skip("the simulated pool's nodes need the local (kwok) cluster")
    try:
        proj = Project(tmp_path)
    except ToolsMissing as e:
        if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
            pytest.skip(f"the Pulumi binaries are not built on this machine: {e}")
        raise  # `make test` builds them: missing here is a broken setup, not a skip
    run = StackRun(cluster, tmp_path, unique, automation=False)
    try:
        yield proj, run
    finally:
        run.stop_all()
        if run.leftovers():  # a failed test still cleans up after itself
            proj.pulumi("destroy", "--yes", check=False)
        if os.environ.get("AUTOCLUSTERS_TEST_SHOW_LOGS"):
            print(proj.log.read_text()[-8000:], file=sys.stderr)


def test_pulumi_up_in_the_repository_directory(project: tuple[Project, StackRun], tmp_path: Path) -> None:
    proj, run = project
    pool = run.pool
    (tmp_path / "state").mkdir(exist_ok=True)  # a file backend is a directory that exists
    proj.pulumi("login", f"file://{tmp_path / 'state'}")
    proj.pulumi("stack", "init", "e2e")
    proj.pulumi("config", "set", "kubernetes:kubeconfig", run.cluster.kubeconfig)
    for key, value in (("local", "true"), ("namespace", run.namespace), ("domain", run.names.domain),
                       ("webhookUrl", f"https://127.0.0.1:{run.webhook_port}/validate")):
        proj.pulumi("config", "set", f"autoclusters:{key}", value)
    for path, value, kind in (("autoclusters:pools[0].name", pool, "string"),
                              ("autoclusters:pools[0].consentMode", "auto", "string"),
                              ("autoclusters:pools[0].nodes.backend", "simulated", "string"),
                              ("autoclusters:pools[0].nodes.count", "2", "int"),
                              ("autoclusters:pools[0].provider.type", "simulated", "string")):
        proj.pulumi("config", "set", "--path", path, value, "--type", kind)

    up = proj.timed("up", "--yes")
    assert proj.outputs()["pools"] == {pool: "auto"}
    assert run.pool_object()["spec"]["consentMode"] == "auto"
    nodes = sorted(n["metadata"]["name"] for n in run.kube.list_nodes(f"{run.names.pool_label}={pool}"))
    assert nodes == [f"{pool}-0", f"{pool}-1"]
    deployment = run.kube.get(f"/apis/apps/v1/namespaces/{run.namespace}/deployments/autoclusters-controller")
    assert deployment["status"].get("readyReplicas") == 2
    from autoclusters.deploy import DEFAULT_IMAGE

    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == DEFAULT_IMAGE

    preview = proj.timed("preview", "--expect-no-changes")

    # The webhook the stack configured serves before anything writes a pool through it.
    run.start_webhook()
    proj.pulumi("config", "set", "--path", "autoclusters:pools[0].consentMode", "propose")
    change = time.monotonic()
    res = proj.pulumi("up", "--yes")
    change_seconds = time.monotonic() - change
    assert "1 updated" in res.stdout or "~ 1 to update" in res.stdout or "1 changed" in res.stdout, res.stdout[-3000:]
    assert proj.outputs()["pools"] == {pool: "propose"}
    assert run.pool_object()["spec"]["consentMode"] == "propose"

    run.stop_all()
    destroy = proj.timed("destroy", "--yes")
    wait_for("the stack's objects to be gone", lambda: not run.leftovers(), timeout=60)
    proj.pulumi("stack", "rm", "--yes", "e2e")
    print(f"\npulumi CLI timings: up {up:.1f}s, preview {preview:.1f}s, consent update {change_seconds:.1f}s, "
          f"destroy {destroy:.1f}s", file=sys.stderr)
