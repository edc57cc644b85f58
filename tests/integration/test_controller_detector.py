"""End to end with the real detector (simulated hardware): injected fault -> condition ->
repair -> reboot -> the detector clears the condition -> the controller closes the repair."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters import names as n
from tests.integration.controller_support import Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture()
def detector(ctl: Env, tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    pool, (node,) = ctl.pool("auto", provider={"type": "simulated", "simulated": {"resetSeconds": 1}})
    ctl.watcher.ignore.add(node)
    spool = tmp_path / "spool"
    log = (tmp_path / "detector.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoclusters.cli.main", "detector", "run", "--kubeconfig", ctl.cluster.kubeconfig,
         "--simulate", "--spool", str(spool), "--node-selector", f"{ctl.names.pool_label}={pool}",
         "--window", "1", "--poll-interval", "0.2"], stdout=log, stderr=subprocess.STDOUT, env=ctl.process_env())
    try:
        yield pool, node, spool
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def inject(spool: Path, node: str, *extra: str) -> None:
    subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "inject-fault", node, "--spool", str(spool),
                    *extra], check=True, capture_output=True)


def test_detector_fault_is_repaired_and_cleared_by_the_detector(ctl: Env, detector: tuple[str, str, Path]) -> None:
    _, node, spool = detector
    inject(spool, node, "--xid", "79", "--gpu", "3")
    done = ctl.record_in(node, "Succeeded", timeout=60)
    assert done["spec"]["fault"]["code"] == "79" and done["status"]["action"] == "reset"
    cond = next(c for c in ctl.node(node)["status"]["conditions"] if c["type"] == ctl.names.gpu_condition)
    assert cond["status"] == "False"  # written by the detector after the reboot
    wait_for("cleaned", lambda: n.EVENT_SUCCEEDED in ctl.reasons(node) and not ctl.has_taint(node))
