"""`make demo` end to end: its own local cluster, `pulumi up`, the runtime on the host, an
Xid 79 repaired under auto and under propose. The demo's exit code is its verdict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoclusters.devcluster.tools import Tools, ToolsMissing


def test_demo_repairs_under_auto_and_propose(tmp_path: Path) -> None:
    try:
        Tools.locate()
        from autoclusters.devcluster.pulumi_env import PulumiTools

        PulumiTools.locate()
    except ToolsMissing as e:
        if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
            pytest.skip(f"the demo needs the locally built binaries: {e}")
        raise
    env = {**os.environ, "AUTOCLUSTERS_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, "-m", "autoclusters.demo", "--cluster", "demo-test"], capture_output=True,
                         text=True, env=env, timeout=600, cwd=Path(__file__).resolve().parents[2])
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
    assert "Every repair succeeded" in out
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^(auto|propose)\s+\S+\s+Xid 79.*$", out, re.M)}
    assert set(rows) == {"auto", "propose"}
    assert all(row.rstrip().endswith("Succeeded") and " reset " in row for row in rows.values())
    # The story an operator reads: detection, the approval asked for and given, each phase.
    for text in ("AutoClustersGPUFault=True  NvidiaXIDError: GPU 3 reported Xid 79 (GPU has fallen off the bus).",
                 "AwaitingApproval", "$ autoclusters approve", "Draining", "Acting", "Succeeded",
                 "back in service"):
        assert text in out
    # Nothing left behind: the demo takes its cluster and runtime down.
    assert not (tmp_path / "state" / "demo-test" / "state.json").exists()
