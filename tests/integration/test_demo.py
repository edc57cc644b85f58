"""`make demo` end to end: its own local cluster, `pulumi up`, the runtime on the host, an
Xid 79 repaired under auto and under propose. The demo's exit code is its verdict.

It runs under the reference system's names (`make demo DOMAIN=crusoe.ai PREFIX=Crusoe
EVENT_SOURCE=nodepool-service`): the default names are what every other test uses, and this
proves the brand reaches every part the demo starts (stack, simulated nodes, runtime, approval,
events)."""

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
    for key in ("AUTOCLUSTERS_DOMAIN", "AUTOCLUSTERS_CONDITION_PREFIX", "AUTOCLUSTERS_CONTROLLER_EVENT_SOURCE"):
        env.pop(key, None)
    res = subprocess.run([sys.executable, "-m", "autoclusters.demo", "--cluster", "demo-test", "--domain", "crusoe.ai",
                          "--condition-prefix", "Crusoe", "--event-source", "nodepool-service"], capture_output=True,
                         text=True, env=env, timeout=600, cwd=Path(__file__).resolve().parents[2])
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
    assert "Every repair succeeded" in out
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^(auto|propose)\s+\S+\s+Xid 79.*$", out, re.M)}
    assert set(rows) == {"auto", "propose"}
    assert all(row.rstrip().endswith("Succeeded") and " reset " in row for row in rows.values())
    # The story an operator reads: detection, the approval asked for and given, each phase.
    for text in ("CrusoeGPUFault=True  NvidiaXIDError: GPU 3 reported Xid 79 (GPU has fallen off the bus).",
                 "label crusoe.ai/nodepool.name=a100", "crusoe.ai/maintenance-required=true",
                 "AwaitingApproval", "$ autoclusters approve", "--domain crusoe.ai", "Draining", "Acting", "Succeeded",
                 "back in service", "add the label crusoe.ai/maintenance-approved=true"):
        assert text in out, text
    assert "autoclusters.io/maintenance" not in out and "autoclusters.io/nodepool" not in out
    assert "AutoClustersGPUFault" not in out
    # the events as kubectl describe lists them, from the reference's source, in order
    listed = re.findall(r"^\s+(Normal|Warning)\s+(Maintenance\w+)\s+nodepool-service\s", out, re.M)
    reasons = [r for _, r in listed if r not in ("MaintenanceDrainWarning", "MaintenanceDrainWaitEnded")]
    assert reasons == ["MaintenanceRequired", "MaintenanceScheduled", "MaintenanceStarted", "MaintenanceSucceeded",
                       "MaintenanceRequired", "MaintenanceAwaitingApproval", "MaintenanceApproved",
                       "MaintenanceStarted", "MaintenanceSucceeded"], listed
    # Nothing left behind: the demo takes its cluster and runtime down.
    assert not (tmp_path / "state" / "demo-test" / "state.json").exists()
