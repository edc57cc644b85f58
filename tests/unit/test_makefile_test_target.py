"""`make test` runs every suite on its own local cluster, whatever the developer's shell exports.

An exported ``AUTOCLUSTERS_TEST_KUBECONFIG`` (or its OPA URL) makes the integration suite use
that cluster, and there the local-only tests skip: the README's test command must not turn
into a run of skips. The test target's own pytest command is taken from ``make -n`` and run
with ``printenv`` in pytest's place, so what is checked is the environment the suites get.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLUSTER_VARS = ("AUTOCLUSTERS_TEST_KUBECONFIG", "AUTOCLUSTERS_TEST_OPA_URL", "AUTOCLUSTERS_TEST_LOCAL")


def _pytest_command(env: dict[str, str]) -> list[str]:
    out = subprocess.run(["make", "-n", "-s", "test"], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    joined = out.replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if "/pytest tests " in line]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def test_make_test_clears_a_cluster_named_by_the_shell() -> None:
    env = {**os.environ, **{v: f"/from/the/shell/{v}" for v in CLUSTER_VARS}}
    argv = _pytest_command(env)
    at = next(i for i, a in enumerate(argv) if a.endswith("/pytest"))
    got = subprocess.run([*argv[:at], "printenv"], env=env, capture_output=True, text=True, check=True).stdout
    seen = dict(line.split("=", 1) for line in got.splitlines() if "=" in line)
    assert not set(CLUSTER_VARS) & set(seen), got
    assert seen.get("AUTOCLUSTERS_REQUIRE_TOOLS") == "1" and seen.get("AUTOCLUSTERS_REQUIRE_TRAINING") == "1"


def test_make_test_says_which_exported_variable_it_ignores() -> None:
    env = {**os.environ, "AUTOCLUSTERS_TEST_KUBECONFIG": "/home/me/.kube/other"}
    out = subprocess.run(["make", "-n", "test"], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    loop = next(line for line in out.replace("\\\n", " ").splitlines() if "make test: ignoring" in line)
    said = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True, check=True).stdout
    assert said.startswith("make test: ignoring AUTOCLUSTERS_TEST_KUBECONFIG=/home/me/.kube/other")
    quiet = {k: v for k, v in env.items() if k not in CLUSTER_VARS}
    assert subprocess.run(["bash", "-c", loop], env=quiet, capture_output=True, text=True,
                          check=True).stdout == ""
