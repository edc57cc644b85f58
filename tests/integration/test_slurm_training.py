"""The Slurm side on real daemons (no Kubernetes needed): the commands the bridge runs drain,
signal, requeue and resume real jobs, and the reference training job (real PyTorch, DDP
across two Slurm nodes) saves on its signal, is requeued and resumes from its checkpoint
with the same final parameters as a run that never stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.devcluster.processes import free_port
from autoclusters.pools.slurm_policy import SignalTarget
from tests.integration.helpers import wait_for
from tests.integration.slurm_support import TRAINING, SlurmHarness, events, slurm_harness, torchrun

NODES = ("gpu-0", "gpu-1", "gpu-2")
REASON = "autoclusters: Xid 79 on GPU 3 (remediation gpu-0-xid-79-1)"


@pytest.fixture()
def slurm(tmp_path: Path) -> Iterator[SlurmHarness]:
    yield from slurm_harness(tmp_path, NODES)


def test_drain_signal_requeue_resume_on_real_slurm(slurm: SlurmHarness, tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n"
                      "echo \"start restart=${SLURM_RESTART_COUNT:-0}\"\n"
                      "trap 'echo got-TERM; exit 143' TERM\n"
                      "for i in $(seq 1 600); do sleep 0.2; done\n")
    job = slurm.sbatch("-N2", "-w", "gpu-0,gpu-1", "--requeue", "--open-mode=append", "-o", str(out), str(script))
    wait_for("the job to run", lambda: (j := slurm.job(job)) and j.state == "RUNNING", timeout=60)
    # An admin's drain on another node, before ours.
    slurm.run("scontrol", "update", "NodeName=gpu-2", "State=DRAIN", "Reason=bad DIMM (ticket 42)")

    slurm.slurm.drain("gpu-0", REASON)
    node = slurm.slurm.nodes(["gpu-0"])["gpu-0"]
    assert node.drain and not node.drained and node.reason == REASON  # DRAINING: the job still runs
    assert [j.job_id for j in slurm.slurm.jobs_on("gpu-0")] == [job]

    slurm.slurm.signal(job, "TERM", SignalTarget.BATCH)
    wait_for("the trap to run", lambda: "got-TERM" in out.read_text(), timeout=60)
    ended = wait_for("the job to end", lambda: (j := slurm.job(job)) and not j.active and j, timeout=60)
    assert ended.state == "FAILED"  # exit 143: stopped on request, not finished
    slurm.slurm.requeue(job)
    drained = wait_for("DRAINED", lambda: n if (n := slurm.slurm.nodes(["gpu-0"])["gpu-0"]).drained else None,
                       timeout=60)
    assert drained.reason == REASON
    requeued = slurm.job(job)
    assert requeued.pending and requeued.restarts == 1

    slurm.slurm.resume("gpu-0")
    wait_for("the requeued job to run again", lambda: "start restart=1" in out.read_text(), timeout=90)
    nodes = slurm.slurm.nodes()
    assert not nodes["gpu-0"].drain
    assert nodes["gpu-2"].drained and nodes["gpu-2"].reason == "bad DIMM (ticket 42)"


def _reference_sha(tmp_path: Path, run: str, steps: int) -> str:
    """An uninterrupted run of the same job (same seed, world size 2) outside Slurm."""
    d = tmp_path / run
    d.mkdir()
    subprocess.run([torchrun(), "--standalone", "--nnodes=1", "--nproc-per-node=2", str(TRAINING / "train.py"),
                    f"--steps={steps}", "--checkpoint-every=10", f"--checkpoint-dir={d / 'ck'}",
                    f"--result={d / 'result.json'}"], check=True, capture_output=True, timeout=600)
    return str(json.loads((d / "result.json").read_text())["sha256"])


def test_training_saves_on_its_signal_is_requeued_and_resumes_to_the_same_parameters(
        slurm: SlurmHarness, tmp_path: Path) -> None:
    launcher = torchrun()
    steps = 60
    run = tmp_path / "run"
    run.mkdir()
    env = {"TRAIN_DIR": str(run), "TORCHRUN": launcher, "TRAIN_SCRIPT": str(TRAINING / "train.py"),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    job = slurm.sbatch("-N2", "-w", "gpu-0,gpu-1", "-o", str(run / "slurm.out"), "--export=ALL",
                       str(TRAINING / "train.sbatch"), f"--steps={steps}", "--checkpoint-every=10",
                       "--step-seconds=0.3", env=env)
    ev = run / "events.jsonl"

    def first_checkpoint() -> bool:
        j = slurm.job(job)
        assert j is not None and (j.active or j.pending), (run / "slurm.out").read_text()[-3000:]
        return any(e["event"] == "checkpoint" for e in events(ev))

    wait_for("the first checkpoint", first_checkpoint, timeout=300)

    slurm.slurm.drain("gpu-0", REASON)
    slurm.slurm.signal(job, "TERM", SignalTarget.STEPS)
    ended = wait_for("the job to stop", lambda: (j := slurm.job(job)) and not j.active and j, timeout=120)
    assert ended.state == "FAILED", (run / "slurm.out").read_text()[-3000:]
    slurm.slurm.requeue(job)
    wait_for("DRAINED", lambda: slurm.slurm.nodes(["gpu-0"])["gpu-0"].drained, timeout=60)
    saved = [e for e in events(ev) if e["event"] == "checkpoint" and e["why"] == "signal"]
    assert len(saved) == 1, events(ev)
    stopped_at = saved[0]["step"]
    assert 0 < stopped_at < steps

    slurm.slurm.resume("gpu-0")
    done = wait_for("the resumed run to finish", lambda: [e for e in events(ev) if e["event"] == "done"],
                    timeout=600, interval=2)
    starts = [e for e in events(ev) if e["event"] == "start"]
    assert [s["step"] for s in starts] == [0, stopped_at] and starts[1]["restart"] == 1
    assert done[0]["step"] == steps
    final = wait_for("the job to complete", lambda: (j := slurm.job(job)) and not j.active and j, timeout=60)
    assert final.state == "COMPLETED" and final.restarts == 1
    assert done[0]["sha256"] == _reference_sha(tmp_path, "reference", steps)
