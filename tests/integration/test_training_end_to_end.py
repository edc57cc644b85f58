"""The training story end to end, all real: a 2-node Slurm partition mirroring two kwok GPU
nodes, the reference PyTorch job across both, Xid 79 injected on one node through the
detector's kernel-log path -> the controller marks the node and warns -> the Slurm bridge
drains the Slurm node with the fault as reason, signals the job (it saves a checkpoint),
requeues it and acks -> the controller resets the node (simulated provider) -> the repair
ends -> the bridge resumes the Slurm node -> the job resumes from its checkpoint and
finishes with the parameters of an uninterrupted run. An admin's drain on a third node is
left alone. Prints the timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.devcluster.processes import free_port
from autoclusters.slurm import decisions as d
from tests.integration.controller_support import Env
from tests.integration.helpers import parse_time, wait_for
from tests.integration.slurm_support import TRAINING, SlurmHarness, events, slurm_harness, torchrun

pytestmark = pytest.mark.integration
STEPS = 80
ADMIN_REASON = "bad DIMM (ticket 42)"


class Scenario:
    def __init__(self, ctl: Env, pool: str, nodes: list[str], slurm: SlurmHarness, spool: Path) -> None:
        self.ctl, self.pool, self.nodes, self.slurm, self.spool = ctl, pool, nodes, slurm, spool


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)


@pytest.fixture()
def scenario(ctl: Env, tmp_path: Path) -> Iterator[Scenario]:
    if not ctl.cluster.local:
        pytest.skip("Slurm's daemons run on this machine and mirror the local cluster's kwok nodes")
    pool, nodes = ctl.pool("auto", nodes=3, drain={"resetDeadlineSeconds": 30, "replaceDeadlineSeconds": 30},
                           provider={"type": "simulated"},  # the controller's --sim-reset-seconds
                           preDrain={"waitSeconds": 120, "acknowledgers": ["slurm"]},
                           slurm={"enabled": True, "signal": "TERM", "signalLeadSeconds": 30})
    for node in nodes:
        ctl.watcher.ignore.add(node)  # the real detector clears the fault
    spool = tmp_path / "spool"
    harness = slurm_harness(tmp_path / "s", tuple(nodes))
    slurm = next(harness)
    procs = [
        _spawn([sys.executable, "-m", "autoclusters.cli.main", "detector", "run", "--kubeconfig",
                ctl.cluster.kubeconfig, "--simulate", "--spool", str(spool), "--node-selector",
                f"{ctl.names.pool_label}={pool}", "--window", "1", "--poll-interval", "0.2"],
               tmp_path / "detector.log", ctl.process_env()),
        _spawn([sys.executable, "-m", "autoclusters.cli.main", "slurm-bridge", "run", "--kubeconfig",
                ctl.cluster.kubeconfig, "--poll-seconds", "0.5"], tmp_path / "bridge.log",
               ctl.process_env(**slurm.local.env())),
    ]
    try:
        yield Scenario(ctl, pool, nodes, slurm, spool)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
        for log in ("detector.log", "bridge.log"):
            print(f"--- {log}\n" + (tmp_path / log).read_text()[-3000:], file=sys.stderr)
        next(harness, None)


def test_xid79_drains_slurm_checkpoints_requeues_repairs_resumes(scenario: Scenario, tmp_path: Path) -> None:
    s, ctl, slurm = scenario, scenario.ctl, scenario.slurm
    bad, peer, other = s.nodes
    launcher = torchrun()
    run = tmp_path / "run"
    run.mkdir()
    env = {"TRAIN_DIR": str(run), "TORCHRUN": launcher, "TRAIN_SCRIPT": str(TRAINING / "train.py"),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    job = slurm.sbatch("-N2", "-w", f"{bad},{peer}", "-o", str(run / "slurm.out"), "--export=ALL",
                       str(TRAINING / "train.sbatch"), f"--steps={STEPS}", "--checkpoint-every=10",
                       "--step-seconds=0.3", env=env)
    ev = run / "events.jsonl"
    wait_for("the first checkpoint", lambda: any(e["event"] == "checkpoint" for e in events(ev)), timeout=300)
    slurm.run("scontrol", "update", f"NodeName={other}", "State=DRAIN", f"Reason={ADMIN_REASON}")
    # An uninterrupted run of the same seed and world size, for the final comparison.
    reference = subprocess.Popen([launcher, "--standalone", "--nnodes=1", "--nproc-per-node=2",
                                  str(TRAINING / "train.py"), f"--steps={STEPS}", "--checkpoint-every=10",
                                  f"--checkpoint-dir={tmp_path / 'ref' / 'ck'}",
                                  f"--result={tmp_path / 'ref.json'}"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)

    t_inject = time.time()
    subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "inject-fault", bad, "--spool", str(s.spool),
                    "--xid", "79", "--gpu", "3"], check=True, capture_output=True)

    def our_drain() -> str:
        node = slurm.slurm.nodes([bad])[bad]
        return node.reason if node.reason.startswith("autoclusters:") else ""

    reason = wait_for("the Slurm drain", our_drain, timeout=60)
    t_drain = time.time()
    record = ctl.record_in(bad, "Succeeded", timeout=240)
    name = record["metadata"]["name"]
    assert "Xid 79" in reason and f"remediation {name}" in reason, reason
    resumed = wait_for("the Slurm node resumed", lambda: not slurm.slurm.nodes([bad])[bad].drain, timeout=60)
    t_resume = time.time()
    assert resumed
    wait_for("the job to finish", lambda: any(e["event"] == "done" for e in events(ev)), timeout=400, interval=2)
    assert reference.wait(600) == 0

    log = events(ev)
    signal = next(e for e in log if e["event"] == "signal")
    saved = next(e for e in log if e["event"] == "checkpoint" and e["why"] == "signal")
    starts = [e for e in log if e["event"] == "start"]
    done = next(e for e in log if e["event"] == "done")
    steps = {st["phase"]: parse_time(st["time"]).timestamp() for st in record["status"].get("steps", [])}
    t_reset = steps["Acting"]
    # The job got its signal and saved before the node was reset.
    assert signal["received"] < t_reset and saved["t"] < t_reset, (signal, steps)
    # It resumed from the saved step (no step lost beyond the checkpoint) and finished.
    assert [st["step"] for st in starts] == [0, saved["step"]] and starts[1]["restart"] == 1
    assert done["step"] == STEPS
    final = wait_for("the job to complete", lambda: (j := slurm.job(job)) and not j.active and j)
    assert final.state == "COMPLETED" and final.restarts == 1
    assert done["sha256"] == json.loads((tmp_path / "ref.json").read_text())["sha256"]
    # The admin's drain is untouched and reported.
    admin = slurm.slurm.nodes([other])[other]
    assert admin.drained and admin.reason == ADMIN_REASON
    node_events = ctl.kube.list_items("/api/v1/namespaces/default/events",
                                      field_selector=f"involvedObject.name={other}")
    assert any(e.get("reason") == d.EVENT_EXTERNAL for e in node_events)
    note = (ctl.kube.get_node(other)["metadata"].get("annotations") or {}).get(ctl.names.slurm_external_drain, "")
    assert note.startswith(ADMIN_REASON), note
    status = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "status", "--kubeconfig",
                             ctl.cluster.kubeconfig, "--pool", s.pool, "-o", "json"], capture_output=True, text=True,
                            check=True, timeout=60, env=ctl.process_env())
    assert {"node": other, "drain": note} in json.loads(status.stdout)["slurmExternalDrains"]
    bad_events = {e.get("reason") for e in ctl.kube.list_items("/api/v1/namespaces/default/events",
                                                         field_selector=f"involvedObject.name={bad}")}
    assert {d.EVENT_DRAINED, d.EVENT_SIGNALLED, d.EVENT_REQUEUED, d.EVENT_READY, d.EVENT_RESUMED} <= bad_events

    rows = [("fault injected (kernel log)", t_inject), ("detected, repair scheduled", steps.get("Scheduled")),
            ("Slurm node drained (seen)", t_drain), ("job signalled", signal["received"]),
            ("checkpoint saved", saved["t"]), ("node reset requested", t_reset),
            ("repair succeeded", steps.get("Succeeded")), ("Slurm node resumed (seen)", t_resume),
            ("job resumed from checkpoint", starts[1]["t"]), ("job finished", done["t"])]
    lost = signal["step"] - saved["step"]
    print(f"\nTimeline (seconds after the fault; record {name}):")
    for what, t in rows:
        print(f"  {(t - t_inject) if t else float('nan'):7.1f}s  {what}")
    print(f"  steps lost: {lost} (saved at step {saved['step']}, resumed at {starts[1]['step']})")
    print(f"  platform part (fault -> node back in Slurm): {t_resume - t_inject:.0f}s here; "
          "reference: ~5 min on real hardware, < 15 min end to end")
