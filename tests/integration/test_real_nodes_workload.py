"""Real workloads through one repair on the local cluster's real nodes (issue 23, item 3).

On real node A run, as a user would: a Deployment of two replicas with a PodDisruptionBudget
(minAvailable 1) and a preStop hook; a one-replica Deployment whose budget allows no
disruption, so only the drain deadline moves it; and the reference training job
(examples/training: train.py under torchrun, real PyTorch on CPU) as an Indexed Job whose
``podFailurePolicy`` ignores ``DisruptionTarget``, checkpointing to a shared volume on SIGTERM
and acknowledging the drain warning from inside its container (drain_ack.py, the pod's own
service account). Node affinity keeps every pod on A until they run there; then B is allowed
too. A fault written into A's own kernel log (never this machine's) reaches A's detector pod,
and the stack's pods (deployed by ``pulumi up``) do the rest: warning, acknowledgement,
cordon, evictions, deletion at the deadline, the shipped ``hostReboot`` Job, verification,
cleanup. Every pod change is recorded by a watch, so what the drain did is read from the
API server's own ordered history, never from a sleep.

PyTorch in the pods: the image has none; the nodes share this machine's filesystem, so the
pod mounts the test venv's site-packages read-only (hostPath) and puts it on PYTHONPATH
(docs/real-nodes.md, "Workloads through one repair").
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters import api
from autoclusters import names as n
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.realnodes import RealNode
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.providers.hostreboot import boot_id
from tests.integration.helpers import kubectl, kubectl_binary, parse_time, wait_for
from tests.integration.real_nodes_support import XID79, Deployed, deployed_stack, repaired
from tests.integration.slurm_support import TRAINING, events, torchrun

STEPS, EVERY, STEP_SECONDS = 120, 10, 0.5
TRAIN_GRACE = 30  # the training's budget for its SIGTERM checkpoint
APP_GRACE, PRESTOP_SECONDS, APP_TERM_SECONDS = 20, 2, 3  # the app takes 2 s in preStop, 3 s after SIGTERM
WAIT_SECONDS, DEADLINE_SECONDS = 30, 45
POOL = {"preDrain.waitSeconds": (str(WAIT_SECONDS), "int"),
        "drain.resetDeadlineSeconds": (str(DEADLINE_SECONDS), "int")}
PLACE = "autoclusters.test/workload"  # the node label the workloads' affinity requires
THREADS = {"OMP_NUM_THREADS": "1"}  # the same in the pods and in the uninterrupted run

APP = f"""
import os, signal, sys, time
log = open("/out/" + os.environ["POD_NAME"] + ".log", "a", buffering=1)
def say(what): log.write(f"{{what}} {{time.time():.3f}}\\n")
def term(signum, frame):
    say("sigterm"); time.sleep({APP_TERM_SECONDS}); say("exit"); sys.exit(0)
signal.signal(signal.SIGTERM, term)
say("start")
while True: time.sleep(1)
"""
PRESTOP = f'echo "prestop $(date +%s.%N)" >> /out/$POD_NAME.log; sleep {PRESTOP_SECONDS}'


def _env(**extra: str) -> list[dict[str, Any]]:
    return [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *({"name": k, "value": v} for k, v in extra.items())]


def _affinity(value: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": PLACE, "operator": "In", "values": [value]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _app(name: str, replicas: int, image: str, out: str, place: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "affinity": _affinity(place), "terminationGracePeriodSeconds": APP_GRACE,
                         "containers": [{"name": "app", "image": image, "command": ["python3", "-c", APP],
                                         "env": _env(),
                                         "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", PRESTOP]}}},
                                         "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
                         "volumes": [{"name": "out", "hostPath": {"path": out, "type": "Directory"}}]}}}}


def _pdb(name: str, **budget: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {**budget, "selector": {"matchLabels": {"app": name}}}}


def _training(image: str, shared: str, site: str, place: str, names: Names) -> list[dict[str, Any]]:
    """The reference job (examples/training/k8s-job.yaml, whose podFailurePolicy it takes) at
    world size 1: its pods run torchrun with the shipped image's python, torch from ``site``,
    the scripts from a ConfigMap."""
    example = next(d for d in yaml.safe_load_all((TRAINING / "k8s-job.yaml").read_text()) if d["kind"] == "Job")
    scripts = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "training"},
               "data": {f: (TRAINING / f).read_text() for f in ("train.py", "drain_ack.py")}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "training"}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "drain-ack"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "drain-ack"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "drain-ack"},
               "subjects": [{"kind": "ServiceAccount", "name": "training"}]}
    run = (f"python3 /scripts/drain_ack.py --domain={names.domain} --events=/checkpoints/events.jsonl & "
           "exec python3 -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=1 /scripts/train.py "
           f"--steps={STEPS} --checkpoint-every={EVERY} --step-seconds={STEP_SECONDS} --checkpoint-dir=/checkpoints/ck "
           "--events=/checkpoints/events.jsonl --result=/checkpoints/result.json")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "training"}, "spec": {
        "completionMode": "Indexed", "completions": 1, "parallelism": 1, "backoffLimit": 2,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": example["spec"]["podFailurePolicy"],
        "template": {"metadata": {"labels": {"app": "training", names.drain_wait_label: "true"}}, "spec": {
            "restartPolicy": "Never", "serviceAccountName": "training", "affinity": _affinity(place),
            "terminationGracePeriodSeconds": TRAIN_GRACE,
            "containers": [{"name": "train", "image": image, "command": ["sh", "-c", run],
                            "env": _env(PYTHONPATH="/opt/torch", HOME="/tmp", USER="training", **THREADS),
                            "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"},
                                             {"name": "torch", "mountPath": "/opt/torch", "readOnly": True},
                                             {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                                             {"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": True}]}],
            "volumes": [{"name": "checkpoints", "hostPath": {"path": shared, "type": "Directory"}},
                        {"name": "torch", "hostPath": {"path": site, "type": "Directory"}},
                        {"name": "scripts", "configMap": {"name": "training"}},
                        {"name": "podinfo", "downwardAPI": {"items": [
                            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]}}}}
    return [scripts, account, role, binding, job]


class PodHistory:
    """Every change of the namespace's pods, in the API server's order (a ``kubectl get -w``)."""

    def __init__(self, kubeconfig: str, ns: str, path: Path) -> None:
        self.path = path
        self._out = path.open("wb")
        self._proc = subprocess.Popen([kubectl_binary(), f"--kubeconfig={kubeconfig}", "get", "pods", "-n", ns,
                                       "-w", "-o", "json", "--output-watch-events"], stdout=self._out,
                                      stderr=subprocess.DEVNULL)

    def events(self) -> list[dict[str, Any]]:
        text, dec, i = self.path.read_text(), json.JSONDecoder(), 0
        out: list[dict[str, Any]] = []
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                return out
            try:
                obj, i = dec.raw_decode(text, i)
            except ValueError:  # a line still being written
                return out
            out.append(obj)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._out.close()


def _ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
    return conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def _log(out: Path, pod: str) -> dict[str, float]:
    """What the app wrote: the time of its start, preStop, SIGTERM and exit."""
    path = out / f"{pod}.log"
    return {w: float(t) for w, t in (ln.split() for ln in path.read_text().splitlines())} if path.exists() else {}


@pytest.fixture()
def stack(real_cluster: ClusterHandle, tmp_path: Path) -> Iterator[Deployed]:
    with deployed_stack(real_cluster, tmp_path, POOL) as d:
        yield d


def test_workloads_are_drained_and_resume_on_the_other_real_node(
        real_cluster: ClusterHandle, stack: Deployed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    launcher = torchrun()  # fails under AUTOCLUSTERS_REQUIRE_TRAINING=1 (make test) without PyTorch
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin
    site = str(Path(spec.origin).parents[1])
    t_start = time.monotonic()
    # An uninterrupted run of the same seed and world size, for the final comparison.
    reference = subprocess.Popen([launcher, "--standalone", "--nnodes=1", "--nproc-per-node=1",
                                  str(TRAINING / "train.py"), f"--steps={STEPS}", f"--checkpoint-every={EVERY}",
                                  f"--checkpoint-dir={tmp_path / 'ref'}", f"--result={tmp_path / 'ref.json'}"],
                                 env={**os.environ, **THREADS}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    stack.proj.pulumi("up", "--yes", timeout=900)
    t_up = time.monotonic() - t_start
    kube, names, cfg = real_cluster.kube, Names(), real_cluster.kubeconfig
    a, b = stack.nodes[0], stack.nodes[1]
    ns = f"acw-{stack.pool[4:]}"
    # Shared by both nodes (they share this machine's disk), as a ReadWriteMany volume would be.
    shared = Path(tempfile.mkdtemp(prefix="acw-", dir="/tmp"))
    (shared / "out").mkdir()
    for d in (shared, shared / "out"):
        d.chmod(0o777)  # the pods run as the image's user
    from autoclusters.deploy import DEFAULT_IMAGE as image

    kubectl(cfg, "create", "namespace", ns)
    history = PodHistory(cfg, ns, tmp_path / "pods.jsonl")
    kube.patch_node(a.name, {"metadata": {"labels": {PLACE: ns}}})
    try:
        items = [_app("web", 2, image, str(shared / "out"), ns), _pdb("web", minAvailable=1),
                 _app("pinned", 1, image, str(shared / "out"), ns), _pdb("pinned", maxUnavailable=0),
                 *_training(image, str(shared), site, ns, names)]
        applied = subprocess.run([kubectl_binary(), f"--kubeconfig={cfg}", "apply", "-n", ns, "-f", "-"],
                                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                                 capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        _repair(real_cluster, stack, ns, a, b, shared, history, reference, tmp_path, capsys, t_up)
    finally:
        history.stop()
        print("--- training events\n" + "\n".join(json.dumps(e) for e in events(shared / "events.jsonl")),
              file=sys.stderr)
        kubectl(cfg, "delete", "namespace", ns, "--wait=false", check=False)
        for node in (a, b):
            with contextlib.suppress(Exception):
                kube.patch_node(node.name, {"metadata": {"labels": {PLACE: None}}})
        if reference.poll() is None:
            reference.kill()
        shutil.rmtree(shared, ignore_errors=True)


def _repair(cluster: ClusterHandle, stack: Deployed, ns: str, a: RealNode, b: RealNode, shared: Path,
            history: PodHistory, reference: subprocess.Popen[bytes], tmp_path: Path,
            capsys: pytest.CaptureFixture[str], t_up: float) -> None:
    kube, names, cfg = cluster.kube, Names(), cluster.kubeconfig
    train_events = shared / "events.jsonl"

    def running_on_a() -> list[dict[str, Any]] | None:
        pods = kube.list_items(f"/api/v1/namespaces/{ns}/pods")
        ok = len(pods) == 4 and all(p["spec"].get("nodeName") == a.name and _ready(p) for p in pods)
        return pods if ok else None

    first = wait_for("the workloads Ready on node A", running_on_a, timeout=120)
    wait_for("the training's first checkpoint",
             lambda: any(e["event"] == "checkpoint" for e in events(train_events)), timeout=180)
    with capsys.disabled():  # the issue's acceptance: the pods run on the real node
        print(f"\nworkloads on {a.name} (pulumi up {t_up:.0f}s):\n"
              + kubectl(cfg, "get", "pods", "-o", "wide", "-n", ns), file=sys.stderr)
    kube.patch_node(b.name, {"metadata": {"labels": {PLACE: ns}}})  # from now on B may take them
    first_names = {p["metadata"]["name"] for p in first}
    before = boot_id(kube.get_node(a.name))
    t_fault = time.time()
    a.write_kernel_log(f"4,1201,{int(time.monotonic() * 1e6)},-;{XID79}")

    wait_for("node A rebooted, verified, uncordoned and unmarked", lambda: repaired(kube, a.name, before),
             timeout=360, interval=1)
    t_repaired = time.time()
    wait_for("the training to finish on B", lambda: any(e["event"] == "done" for e in events(train_events)),
             timeout=300, interval=1)
    with capsys.disabled():
        print("\nafter the repair:\n" + kubectl(cfg, "get", "pods", "-o", "wide", "-n", ns), file=sys.stderr)
    assert reference.wait(300) == 0

    path = Kube.custom_path(names.api_group, api.VERSION, "remediations")
    record = next(r for r in kube.list_items(path) if r["spec"]["node"] == a.name)
    status = record["status"]
    phases = [s["phase"] for s in status["steps"]]
    assert status["phase"] == "Succeeded" and [p for i, p in enumerate(phases) if phases[i - 1:i] != [p]] == [
        "Scheduled", "Draining", "Acting", "Verifying", "Succeeded"], status["steps"]
    warned, eviction = parse_time(status["drainStarted"]).timestamp(), parse_time(status["evictionStarted"])
    pre_drain_deadline = parse_time(status["preDrainDeadline"])

    # The training pod acknowledged from inside its container, with its own token: its ack names
    # the record, and the wait ended on it, well before the pre-drain deadline.
    acks = [e for e in events(train_events) if e["event"] == "ack"]
    assert [e["record"] for e in acks] == [record["metadata"]["name"]], acks
    assert (pre_drain_deadline - eviction).total_seconds() > WAIT_SECONDS / 2, status
    assert eviction.timestamp() >= acks[0]["t"] - 1  # (the API's times are whole seconds)
    trainer0 = next(p["metadata"]["name"] for p in first if p["metadata"]["labels"].get("app") == "training")
    assert any(s["phase"] == "Draining" and f"arrived (pod {ns}/{trainer0})" in s["message"]
               for s in status["steps"]), status["steps"]

    # What the drain did, in the API server's order.
    seen = history.events()
    last: dict[str, dict[str, Any]] = {}
    web_ready: dict[str, bool] = {}
    lowest_web, both_ran = 2, False
    for ev in seen:
        pod = ev["object"]
        name = pod["metadata"]["name"]
        last[name] = pod
        if pod["metadata"]["labels"].get("app") == "web":
            web_ready[name] = ev["type"] != "DELETED" and _ready(pod)
            both_ran = both_ran or sum(web_ready.values()) >= 2
            if both_ran:  # from then on, never below minAvailable
                lowest_web = min(lowest_web, sum(web_ready.values()))
    assert lowest_web >= 1, "the web Deployment went below its PodDisruptionBudget's minAvailable"
    out = shared / "out"
    web_old = sorted(n for n in first_names if n.startswith("web-"))
    logs = {n: _log(out, n) for n in web_old}
    # Each web pod ran its preStop hook, then got SIGTERM, and was left its grace period to exit.
    for name, log in logs.items():
        assert log.keys() >= {"start", "prestop", "sigterm", "exit"}, (name, log)
        assert log["prestop"] + PRESTOP_SECONDS - 0.5 <= log["sigterm"] <= log["exit"] - APP_TERM_SECONDS + 0.5, log
        conds = {c["type"]: c for c in last[name]["status"].get("conditions") or []}
        assert conds.get("DisruptionTarget", {}).get("reason") == "EvictionByEvictionAPI", (name, conds)
    # The budget held: the second web pod was evicted only after a replacement on B was Ready.
    later = max(web_old, key=lambda n: logs[n]["prestop"])
    replacements = [n for n in web_ready if n not in first_names]
    index = {id(ev): i for i, ev in enumerate(seen)}
    ready_b = min(index[id(ev)] for ev in seen if ev["object"]["metadata"]["name"] in replacements
                  and ev["object"]["spec"].get("nodeName") == b.name and _ready(ev["object"]))
    doomed = min(index[id(ev)] for ev in seen if ev["object"]["metadata"]["name"] == later
                 and ev["object"]["metadata"].get("deletionTimestamp"))
    assert ready_b < doomed, "the second web pod was evicted before its replacement was Ready on B"
    # The pinned pod (a budget that allows no disruption) stayed until the drain deadline, then
    # was deleted (not evicted), still with its own grace period: preStop, SIGTERM, a clean exit.
    pinned = next(n for n in first_names if n.startswith("pinned-"))
    plog = _log(out, pinned)
    assert plog.keys() >= {"prestop", "sigterm", "exit"}, plog
    assert plog["prestop"] >= warned + DEADLINE_SECONDS - 1, (plog, status)
    assert "DisruptionTarget" not in {c["type"] for c in last[pinned]["status"].get("conditions") or []}

    # The training pod got SIGTERM (evicted: DisruptionTarget, which its Job ignores), saved at the
    # next step, and its replacement on B resumed from that checkpoint: no step lost, and the
    # final parameters equal the uninterrupted run's.
    tlog = events(train_events)
    signal = next(e for e in tlog if e["event"] == "signal")
    saved = next(e for e in tlog if e["event"] == "checkpoint" and e["why"] == "signal")
    starts = [e for e in tlog if e["event"] == "start"]
    done = next(e for e in tlog if e["event"] == "done")
    assert signal["signal"] == 15 and saved["step"] == signal["step"]
    assert [s["step"] for s in starts] == [0, saved["step"]] and done["step"] == STEPS
    assert done["sha256"] == json.loads((tmp_path / "ref.json").read_text())["sha256"]
    trainers = [n for n, p in last.items() if p["metadata"]["labels"].get("app") == "training"]
    old_trainer = next(n for n in trainers if n in first_names)
    assert "DisruptionTarget" in {c["type"] for c in last[old_trainer]["status"].get("conditions") or []}
    new_trainer = next(n for n in trainers if n not in first_names)
    assert last[new_trainer]["spec"]["nodeName"] == b.name

    def complete() -> set[str]:  # the Job controller's answer trails the pod's exit
        job = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/training")
        true = {c["type"] for c in job["status"].get("conditions") or [] if c["status"] == "True"}
        return true if true & {"Complete", "Failed"} else set()

    assert "Complete" in wait_for("the training Job's end", complete, timeout=60)
    # Everything that left A went to B.
    assert {p["spec"].get("nodeName") for n, p in last.items() if n not in first_names} == {b.name}

    # Events show every step: on the node, and the warning on each of its workload pods.
    node_reasons = {e.get("reason") for e in kube.list_items("/api/v1/events",
                                                             field_selector=f"involvedObject.name={a.name}")}
    for reason in (n.EVENT_REQUIRED, n.EVENT_SCHEDULED, n.EVENT_DRAIN_WARNING,
                   n.EVENT_DRAIN_WAIT_ENDED, n.EVENT_STARTED, n.EVENT_SUCCEEDED):
        assert reason in node_reasons, (reason, node_reasons)
    pod_events = kube.list_items(f"/api/v1/namespaces/{ns}/events")
    warned_pods = {e["involvedObject"]["name"] for e in pod_events if e.get("reason") == n.EVENT_DRAIN_WARNING}
    assert warned_pods >= first_names, (warned_pods, first_names)

    t0 = t_fault
    rows = [("fault in A's kernel log", t_fault), ("warning (drain started)", warned),
            ("acknowledged from the training pod", acks[0]["t"]), ("eviction started", eviction.timestamp()),
            ("training got SIGTERM", signal["received"]), ("checkpoint saved", saved["t"]),
            ("pinned pod deleted at the deadline (its preStop)", plog["prestop"]),
            ("node A repaired", t_repaired), ("training resumed on B", starts[1]["t"]),
            ("training finished", done["t"])]
    for step in status["steps"]:
        print(f"  step {step['phase']:<10} {step.get('message', '')}", file=sys.stderr)
    print(f"\nworkload repair on {a.name} (record {record['metadata']['name']}; pulumi up {t_up:.0f}s):",
          file=sys.stderr)
    for what, t in sorted(rows, key=lambda row: row[1]):
        print(f"  {t - t0:7.1f}s  {what}", file=sys.stderr)
