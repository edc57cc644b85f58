"""Soak of the remediation controller: a steady stream of faults for a long time, on a running cluster.

    python benchmarks/controller_soak.py --kubeconfig $(autoclusters dev kubeconfig --name NAME) \\
        --nodes 1000 --interval 3 --duration 3600 --sample 30 --out soak.csv

Not a test: it looks for a leak. With the machinery of ``controller_overhead.py`` it creates a
pool of ``--nodes`` simulated GPU nodes (simulated provider, ``--reset-seconds``) and runs
``autoclusters controller run`` as a subprocess under its own service account. Then, every
``--interval`` seconds for ``--duration`` seconds, it raises a GPU fault (Xid 79, written the way
the detector writes it) on the next healthy node, round-robin (a node is healthy when it has no
fault open: none raised, or its last one's repair ended), and acts as the detector after each
reboot (clears the condition when it sees the new bootID).

Every ``--sample`` seconds it prints one line: elapsed time, the controller's RSS (VmRSS from
/proc), and the repairs succeeded, failed and in flight so far. At the end: repairs, failures,
p50/p99 fault written -> Succeeded, RSS first/last/max, and the least-squares RSS slope in MiB per
hour over the second half of the run (the first half holds the warm-up: informer caches filling,
the allocator's arenas growing), with a verdict against ``--max-slope`` (docs/benchmarks/soak.md
says why 5 MiB/h). ``--out`` also writes the samples as CSV.

A repair takes the reset plus ~5-15 s of drain, verification and the stand-in detector here; the
pool's ``maxConcurrentRepairs`` is ``--max-concurrent``: keep ``repair time / --interval`` well
under it, or the repairs queue and the latency measures the queue.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller_overhead import (
    MESSAGE,
    Watcher,
    cleanup,
    cleared_gpu_condition,
    controller_identity,
    free_port,
    parse_metrics,
    pct,
)

from autoclusters import api
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.deploy.crds import crds
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Conflict, Kube, KubeError
from autoclusters.kube.objects import node_ready
from autoclusters.pool_fields import MAX_REPAIRS
from autoclusters.sim import nodes as sim

MAX_SLOPE_MIB_PER_H = 5.0
MIN_HALF_S = 600.0  # a second half shorter than this is warm-up and noise: no verdict
ENDED = {api.Phase.SUCCEEDED, api.Phase.FAILED, api.Phase.HUMAN_NEEDED, api.Phase.NOT_NEEDED, api.Phase.CLOSED}
FAILED = {api.Phase.FAILED, api.Phase.HUMAN_NEEDED}


def rss_kib(pid: int) -> int:
    """The process's resident set (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, in value per hour; nan under two points."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 3600


@dataclass
class Sample:
    elapsed_s: float
    rss_mib: float
    succeeded: int
    failed: int
    in_flight: int
    raised: int
    records: int
    repaired_nodes: int  # nodes whose repair has succeeded at least once


class Repairs:
    """Faults raised and how their repairs end, from the benchmark's own watch streams."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open_fault: dict[str, float] = {}  # node -> when its open fault was written (monotonic)
        self.seen_phase: dict[str, str] = {}  # record -> last phase seen
        self.ended: set[str] = set()  # records whose repair ended (counted once)
        self.latency: list[float] = []  # fault written -> Succeeded, seconds
        self.succeeded = 0
        self.failed = 0
        self.raised = 0
        self.failures: list[str] = []  # "node record phase" of each failed repair
        self.boots: dict[str, str] = {}
        self.present: set[str] = set()  # records that exist now (the controller's cache holds them too)
        self.repaired: set[str] = set()  # nodes repaired at least once

    def on_record(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        name, node = obj["metadata"]["name"], obj["spec"]["node"]
        phase = (obj.get("status") or {}).get("phase") or ""
        with self.lock:
            if kind == "DELETED":
                self.present.discard(name)
            else:
                self.present.add(name)
            self.seen_phase[name] = phase
            if phase not in ENDED or name in self.ended:
                return
            self.ended.add(name)
            fault_at = self.open_fault.pop(node, None)
            if fault_at is None:
                return  # a record from before this run
            if phase == api.Phase.SUCCEEDED:
                self.succeeded += 1
                self.latency.append(t - fault_at)
                self.repaired.add(node)
            elif phase in FAILED:
                self.failed += 1
                self.failures.append(f"{node} {name} {phase}")
            # NotNeeded/Closed: the fault was cleared before the repair; neither counted

    def in_flight(self) -> int:
        with self.lock:
            return len(self.open_fault)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=3.0, help="seconds between two faults")
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of faults")
    ap.add_argument("--sample", type=float, default=30.0, help="seconds between two printed samples")
    ap.add_argument("--reset-seconds", type=float, default=5.0, help="simulated provider's reset time")
    ap.add_argument("--max-concurrent", type=int, default=20, help="the pool's maxConcurrentRepairs")
    ap.add_argument("--max-repairs", type=int, default=0,
                    help="the pool's attemptBudget.maxRepairs (default: the faults a node gets in the run, plus "
                         "one, at least the pool's default): a node's third fault in a week is HumanNeeded by design")
    ap.add_argument("--workers", type=int, default=ControllerConfig().workers)
    ap.add_argument("--retention-seconds", type=float, default=300.0,
                    help="the controller's retention of closed records (--retention-days), so that the records it "
                         "caches reach a steady number instead of growing with the repairs as 90 days would")
    ap.add_argument("--gc-interval", type=float, default=60.0, help="the controller's --gc-interval-seconds")
    ap.add_argument("--max-slope", type=float, default=MAX_SLOPE_MIB_PER_H,
                    help="verdict bound on the RSS slope over the second half, MiB per hour")
    ap.add_argument("--drain-timeout", type=float, default=120.0,
                    help="after the last fault, wait at most this long for the open repairs to end")
    ap.add_argument("--out", default="", help="also write the samples as CSV here")
    ap.add_argument("--keep", action="store_true", help="leave the pool, nodes and records behind")
    ap.add_argument("--tracemalloc", default="", metavar="DIR",
                    help="run the controller under tracemalloc (benchmarks/traced_controller.py): a "
                         "snapshot into DIR at a third of the faults and at the end, and the "
                         "allocations that grew between them printed (slows the controller)")
    ap.add_argument("--tracemalloc-frames", type=int, default=12, help="frames kept per allocation")
    args = ap.parse_args()

    handle = ClusterHandle(args.kubeconfig, local=True)
    kube, names = handle.kube, handle.names
    run_id = secrets.token_hex(3)
    pool = namespace = f"soak-{run_id}"
    max_repairs = args.max_repairs or max(MAX_REPAIRS.default,
                                          math.ceil(args.duration / args.interval / args.nodes) + 1)
    print(f"pool {pool}: {args.nodes} nodes, a fault every {args.interval}s for {args.duration:.0f}s, "
          f"reset {args.reset_seconds}s, maxConcurrentRepairs {args.max_concurrent}, "
          f"attemptBudget.maxRepairs {max_repairs}", flush=True)
    handle.apply(crds(names))
    with contextlib.suppress(Conflict):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    rbac, sa_kubeconfig = controller_identity(handle, namespace, run_id, expiration=int(args.duration) + 3600)
    kube.create(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools"), {
        "apiVersion": f"{names.api_group}/{api.VERSION}", "kind": "GpuNodePool", "metadata": {"name": pool},
        "spec": {"consentMode": "auto", "maxConcurrentRepairs": args.max_concurrent,
                 "attemptBudget": {"maxRepairs": max_repairs},
                 "provider": {"type": "simulated", "simulated": {"resetSeconds": args.reset_seconds}}}})
    node_names = [f"{pool}-{i}" for i in range(args.nodes)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda n: sim.create_gpu_node(kube, n, pool, names), node_names))
    deadline = time.monotonic() + max(300.0, args.nodes * 0.15)
    while time.monotonic() < deadline:
        if sum(node_ready(n) for n in kube.list_nodes(f"{names.pool_label}={pool}")) == args.nodes:
            break
        time.sleep(1)
    print(f"{args.nodes} nodes Ready in {time.monotonic() - t0:.1f}s", flush=True)

    repairs = Repairs()
    detectors = ThreadPoolExecutor(16, thread_name_prefix="detector")

    def clear_fault(name: str) -> None:
        try:
            kube.patch_node_status(name, cleared_gpu_condition(names))
        except KubeError as e:
            print(f"the stand-in detector could not clear {name}'s fault: {e}", flush=True)

    def on_node(_t: float, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        boot = ((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
        with repairs.lock:
            before = repairs.boots.get(name)
            repairs.boots[name] = boot
            faulty = name in repairs.open_fault
        if before and boot and before != boot and faulty:
            detectors.submit(clear_fault, name)  # the stand-in detector: healthy after the reboot

    rec_watch = Watcher(kube, Kube.custom_path(names.api_group, api.VERSION, "remediations"),
                        f"{names.api_group}/pool={pool}", repairs.on_record)
    node_watch = Watcher(kube, "/api/v1/nodes", f"{names.pool_label}={pool}", on_node)
    rec_watch.start()
    node_watch.start()

    port = free_port()
    log_path = f"/tmp/controller-soak-{run_id}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed at the end
    runner = [sys.executable, "-m", "autoclusters.cli.main"]
    if args.tracemalloc:
        runner = [sys.executable, str(Path(__file__).with_name("traced_controller.py")), args.tracemalloc,
                  str(args.tracemalloc_frames), "--"]
    proc = subprocess.Popen([*runner, "controller", "run",
                             "--kubeconfig", sa_kubeconfig, "--namespace", namespace,
                             "--metrics-port", str(port), "--workers", str(args.workers),
                             "--retention-days", f"{args.retention_seconds / 86400:.8f}",
                             "--gc-interval-seconds", str(args.gc_interval)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    snapshots: list[Path] = []

    def snapshot() -> None:
        """A tracemalloc snapshot of the controller (SIGUSR2 to the traced controller), waited for."""
        path = Path(args.tracemalloc) / f"snapshot-{len(snapshots) + 1}.pickle"
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 120
        while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        if path.exists():
            snapshots.append(path)
            print(f"tracemalloc snapshot {path}", flush=True)
        else:
            print(f"tracemalloc: no snapshot {path} within 120 s", flush=True)
    print(f"controller pid {proc.pid}, log {log_path}", flush=True)

    def scrape() -> dict[str, float]:
        return parse_metrics(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if scrape().get("autoclusters_controller_leader") == 1:
                break
        time.sleep(0.3)
    else:
        raise SystemExit(f"the controller did not lead within 60 s (see {log_path})")
    time.sleep(3)  # the informers' initial lists
    deadline = time.monotonic() + 120
    while scrape().get("autoclusters_workqueue_depth", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)  # the start-up's reconcile of every node

    def raise_fault(node: str) -> None:
        now = utc_iso(SystemClock().now())
        with repairs.lock:
            repairs.open_fault[node] = time.monotonic()
            repairs.raised += 1
        kube.patch_node_status(node, {"status": {"conditions": [{
            "type": names.gpu_condition, "status": "True", "reason": "NvidiaXIDError", "message": MESSAGE,
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    samples: list[Sample] = []
    skipped = 0  # fault ticks with no healthy node (every node had a fault open)
    raise_errors = 0

    def take_sample(elapsed: float) -> None:
        with repairs.lock:
            s = Sample(elapsed, rss_kib(proc.pid) / 1024, repairs.succeeded, repairs.failed,
                       len(repairs.open_fault), repairs.raised, len(repairs.present), len(repairs.repaired))
        samples.append(s)
        print(f"t={s.elapsed_s:7.0f}s rss={s.rss_mib:7.1f} MiB succeeded={s.succeeded} failed={s.failed} "
              f"in_flight={s.in_flight} raised={s.raised} records={s.records} repaired_nodes={s.repaired_nodes}",
              flush=True)

    start = time.monotonic()
    next_fault, next_sample, cursor = start, start, 0
    snap_at = start + args.duration / 3 if args.tracemalloc else float("inf")
    take_sample(0.0)
    next_sample += args.sample
    while (now := time.monotonic()) < start + args.duration:
        if proc.poll() is not None:
            print(f"the controller exited with {proc.returncode} (see {log_path})", flush=True)
            break
        if now >= next_fault:
            next_fault += args.interval
            with repairs.lock:
                busy = set(repairs.open_fault)
            for k in range(len(node_names)):
                node = node_names[(cursor + k) % len(node_names)]
                if node not in busy:
                    cursor = (cursor + k + 1) % len(node_names)
                    try:
                        raise_fault(node)
                    except KubeError as e:
                        raise_errors += 1
                        with repairs.lock:
                            repairs.open_fault.pop(node, None)
                        print(f"could not raise a fault on {node}: {e}", flush=True)
                    break
            else:
                skipped += 1
        if now >= next_sample:
            take_sample(now - start)
            next_sample += args.sample
        if now >= snap_at:
            snap_at = float("inf")
            snapshot()
        time.sleep(max(0.0, min(next_fault, next_sample, start + args.duration) - time.monotonic()))
    faults_end = time.monotonic()
    deadline = faults_end + args.drain_timeout
    while repairs.in_flight() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    if proc.poll() is None:
        take_sample(time.monotonic() - start)
        if args.tracemalloc:
            snapshot()
            if len(snapshots) == 2:
                print_growth(snapshots[0], snapshots[1])

    # --- report ----------------------------------------------------------------------------------
    half = [(s.elapsed_s, s.rss_mib) for s in samples if s.elapsed_s >= (faults_end - start) / 2]
    rss = [s.rss_mib for s in samples]
    # Every node's first repair leaves state on it for good (the fault condition, now False, and
    # the provider's annotations: the cached node grows), bounded by the fleet, not by time; at
    # 1,000 nodes and a fault every 3 s that fill takes most of an hour. So the bound is judged
    # after the last node's first repair, when that leaves a window of MIN_HALF_S.
    covered = next((s for s in samples if s.repaired_nodes >= args.nodes), None)
    window_start = max((faults_end - start) / 2, covered.elapsed_s if covered else float("inf"))
    steady = [(s.elapsed_s, s.rss_mib) for s in samples if s.elapsed_s >= window_start]
    judged = steady if len(steady) >= 2 and steady[-1][0] - steady[0][0] >= MIN_HALF_S else half
    slope = slope_per_hour(judged)
    with repairs.lock:
        latency, failures, open_left = list(repairs.latency), list(repairs.failures), dict(repairs.open_fault)
        succeeded, failed, raised = repairs.succeeded, repairs.failed, repairs.raised
    print(f"\n{raised} faults raised in {faults_end - start:.0f}s ({skipped} ticks without a healthy node, "
          f"{raise_errors} write errors); repairs succeeded {succeeded}, failed {failed}, still open "
          f"{len(open_left)} after {args.drain_timeout:.0f}s of drain")
    if failures:
        print("failed: " + "; ".join(failures[:10]))
    if open_left:
        print("open: " + ", ".join(sorted(open_left)[:10]))
    print(f"fault written -> Succeeded: p50 {pct(latency, 0.5):.2f} s, p99 {pct(latency, 0.99):.2f} s, "
          f"max {max(latency or [float('nan')]):.2f} s (reset {args.reset_seconds}s and the stand-in "
          "detector included)")
    print(f"controller RSS: first {rss[0]:.1f} MiB, last {rss[-1]:.1f} MiB, max {max(rss):.1f} MiB; "
          f"slope over the second half ({len(half)} samples) {slope_per_hour(half):+.2f} MiB/h")
    if covered is not None:
        print(f"every node repaired once at t={covered.elapsed_s:.0f}s (RSS {covered.rss_mib:.1f} MiB, "
              f"{(covered.rss_mib - rss[0]) * 1024 / args.nodes:+.1f} KiB per node since the start); slope after "
              f"it ({len(steady)} samples) {slope_per_hour(steady):+.2f} MiB/h")
    else:
        print(f"{samples[-1].repaired_nodes if samples else 0} of {args.nodes} nodes repaired at least once: the "
              "per-node fill had not ended (judged over the second half)")
    judged_what = "after every node's first repair" if judged is steady else "over the second half"
    ok = slope < args.max_slope and failed == 0 and not open_left and proc.poll() is None
    span = judged[-1][0] - judged[0][0] if judged else 0.0
    warm = args.retention_seconds + args.gc_interval  # the records reach their steady number after this
    verdict = "PASS" if ok else "FAIL"
    if span < MIN_HALF_S or (faults_end - start) / 2 < warm:  # warm-up and noise: the slope means nothing yet
        verdict = (f"INCONCLUSIVE, would be {verdict} (the window spans {span:.0f} s: a slope needs "
                   f"{MIN_HALF_S:.0f} s, starting after the records level off at {warm:.0f} s)")
    print(f"verdict: {verdict} (bound: RSS slope < {args.max_slope} MiB/h {judged_what} ({slope:+.2f}), "
          "no failed or unfinished repair, the controller alive)", flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["elapsed_s", "rss_mib", "succeeded", "failed", "in_flight", "raised", "records",
                        "repaired_nodes"])
            for s in samples:
                w.writerow([f"{s.elapsed_s:.1f}", f"{s.rss_mib:.2f}", s.succeeded, s.failed, s.in_flight, s.raised,
                            s.records, s.repaired_nodes])

    detectors.shutdown(wait=False)
    rec_watch.stop.set()
    node_watch.stop.set()
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    log.close()
    if not args.keep:
        cleanup(kube, names, pool, namespace, rbac)
    return 0 if ok else 1


def print_growth(first: Path, last: Path, top: int = 15) -> None:
    """The allocation sites (tracebacks) whose live memory grew most from ``first`` to ``last``."""
    import linecache
    import tracemalloc

    diff = tracemalloc.Snapshot.load(str(last)).compare_to(tracemalloc.Snapshot.load(str(first)), "traceback")
    grown = sum(d.size_diff for d in diff)
    print(f"\ntracemalloc: live memory grew {grown / 2**20:+.2f} MiB from {first.name} to {last.name}; "
          f"the {top} sites that grew most:")
    for d in diff[:top]:
        print(f"{d.size_diff / 1024:+9.1f} KiB {d.count_diff:+7d} blocks")
        for f in list(d.traceback)[-6:]:
            line = linecache.getline(f.filename, f.lineno).strip()[:90]
            print(f"      {f.filename.split('site-packages/')[-1]}:{f.lineno} {line}")


if __name__ == "__main__":
    sys.exit(main())
