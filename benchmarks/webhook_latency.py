"""Webhook latency at increasing AdmissionReview rates, and OPA evaluation time alone.

Method (docs/benchmarks/admission.md): a real OPA server loaded with ``policies/`` (decision
logs on, as deployed) and the real webhook (``autoclusters webhook run``, TLS, its own
process) on loopback. An open-loop generator sends reviews at a fixed rate for a fixed time;
each latency is measured from the request's *scheduled* send time, so a stall counts
against every request it delays. The reviews cycle through the shipped admission samples,
and every answer is checked against the sample's folder: a wrong allow is a failure.

OPA alone is measured twice: ``opa bench`` (evaluation in-process, no HTTP) and the Data
API over HTTP at the same rates (what the webhook adds is the difference).

    .venv/bin/python benchmarks/webhook_latency.py --rates 100,500,1000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoclusters.rego import opa  # noqa: E402
from autoclusters.webhook.review import opa_input  # noqa: E402

SAMPLES = ROOT / "examples" / "policy-samples" / "admission"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30, context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1, context=context):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


def node_bulk() -> dict[str, Any]:
    """What a real GPU node carries besides labels (~25 KB of JSON): images, conditions,
    addresses, capacity, managed fields. The API server sends it all to the webhook."""
    images = [{"names": [f"registry.example.com/team{i}/image{i}@sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}",
                         f"registry.example.com/team{i}/image{i}:v{i}.0"], "sizeBytes": 1_000_000_000 + i}
              for i in range(50)]
    conditions = [{"type": t, "status": "False", "reason": f"No{t}", "message": f"kubelet has no {t}",
                   "lastHeartbeatTime": "2026-11-29T08:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z"}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "AutoClustersGPUFault",
                            "AutoClustersInterconnectFault", "GPUHealthDetectorDegraded")]
    managed = [{"manager": f"m{i}", "operation": "Update", "apiVersion": "v1", "time": "2026-11-29T08:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {f"f:l{j}": {} for j in range(20)}}}}
               for i in range(6)]
    status = {"capacity": {"cpu": "208", "memory": "2113546Mi", "nvidia.com/gpu": "8", "pods": "110"},
              "allocatable": {"cpu": "200", "memory": "2000000Mi", "nvidia.com/gpu": "8", "pods": "110"},
              "conditions": conditions, "images": images,
              "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": "n"}],
              "nodeInfo": {"bootID": str(uuid.uuid4()), "kernelVersion": "6.8.0", "kubeletVersion": "v1.34.4"}}
    return {"status": status, "managedFields": managed}


def load_samples() -> list[tuple[dict[str, Any], bool]]:
    """The shipped admission samples, with realistic Node bodies."""
    bulk = node_bulk()
    out = []
    for kind in ("allowed", "disallowed"):
        for f in sorted((SAMPLES / kind).glob("*.json")):
            review = json.loads(f.read_text())
            for key in ("object", "oldObject"):
                obj = review["request"].get(key)
                if isinstance(obj, dict):
                    obj["status"] = bulk["status"]
                    obj["metadata"]["managedFields"] = bulk["managedFields"]
            out.append((review, kind == "allowed"))
    return out


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


async def run_rate(url: str, rate: int, seconds: float, samples: list[tuple[dict[str, Any], bool]],
                   ctx: ssl.SSLContext | None, wrap: bool) -> dict[str, Any]:
    """Open loop: request i is due at start + i/rate; latency counts from that moment."""
    latencies: list[float] = []
    wrong_allow = wrong_deny = errors = 0
    total = int(rate * seconds)
    connector = aiohttp.TCPConnector(limit=256, ssl=ctx if ctx else False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as session:
        # Warm the connection pool so TLS handshakes are not in the numbers.
        await asyncio.gather(*(one(session, url, samples[0][0], wrap) for _ in range(32)))
        start = time.perf_counter() + 0.05

        async def fire(i: int) -> None:
            nonlocal wrong_allow, wrong_deny, errors
            review, expect = samples[i % len(samples)]
            review = {**review, "request": {**review["request"], "uid": str(uuid.uuid4())}}
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                allowed = await one(session, url, review, wrap)
            except (aiohttp.ClientError, TimeoutError):
                errors += 1
                return
            latencies.append(time.perf_counter() - due)
            if allowed and not expect:
                wrong_allow += 1
            elif not allowed and expect:
                wrong_deny += 1

        await asyncio.gather(*(fire(i) for i in range(total)))
    return {"rate": rate, "requests": total, "answered": len(latencies), "errors": errors,
            "p50_ms": percentile(latencies, 50) * 1000, "p99_ms": percentile(latencies, 99) * 1000,
            "max_ms": max(latencies, default=float("nan")) * 1000,
            "mean_ms": statistics.fmean(latencies) * 1000 if latencies else float("nan"),
            "wrong_allows": wrong_allow, "wrong_denials": wrong_deny}


async def one(session: aiohttp.ClientSession, url: str, review: dict[str, Any], wrap: bool) -> bool:
    body = {"input": opa_input(review["request"])} if wrap else review
    async with session.post(url, json=body) as r:
        out = await r.json()
    if wrap:
        return bool((out.get("result") or {}).get("allowed"))
    return bool(out["response"]["allowed"])


async def run_serial(url: str, count: int, samples: list[tuple[dict[str, Any], bool]],
                     ctx: ssl.SSLContext | None, wrap: bool) -> dict[str, Any]:
    """One request in flight at a time: the cost of a review without any queueing."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=1, ssl=ctx if ctx else False)
    async with aiohttp.ClientSession(connector=connector) as session:
        await one(session, url, samples[0][0], wrap)
        for i in range(count):
            review = samples[i % len(samples)][0]
            t = time.perf_counter()
            await one(session, url, review, wrap)
            latencies.append(time.perf_counter() - t)
    return {"requests": count, "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000}


async def settle(url: str, ctx: ssl.SSLContext | None, wrap: bool, samples: list[tuple[dict[str, Any], bool]],
                 limit_s: float = 60) -> float:
    """Waits until the servers have drained what an overloaded run left queued (five fast
    answers in a row), so one run's backlog is not charged to the next. Returns seconds waited."""
    start = time.perf_counter()
    fast = 0
    connector = aiohttp.TCPConnector(limit=1, ssl=ctx if ctx else False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        while fast < 5 and time.perf_counter() - start < limit_s:
            t = time.perf_counter()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                await one(session, url, samples[0][0], wrap)
            fast = fast + 1 if time.perf_counter() - t < 0.02 else 0
            await asyncio.sleep(0.05)
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc; Linux only)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def opa_bench(binary: str, policies: Path, review: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(review, f)
    proc = subprocess.run([binary, "bench", "--format=json", *opa.load_args(policies), "-i", f.name,
                           "data.autoclusters.admission.decision"], capture_output=True, text=True, check=True)
    os.unlink(f.name)
    res = json.loads(proc.stdout)
    extra = res.get("Extra") or {}
    return {"ns_per_op": res["T"] / res["N"], "iterations": res["N"],
            "eval_p50_us": extra.get("histogram_timer_rego_query_eval_ns_median", 0) / 1000,
            "eval_p99_us": extra.get("histogram_timer_rego_query_eval_ns_99%", 0) / 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100,500,1000")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--serial", type=int, default=1000, help="reviews sent one at a time (latency and CPU cost)")
    ap.add_argument("--decision-logs", action=argparse.BooleanOptionalAction, default=True,
                    help="OPA decision logs to the console (as deployed; the webhook then logs decision ids)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    binary, policies = str(opa.opa_binary()), opa.policies_dir()
    samples = load_samples()
    procs: list[subprocess.Popen[bytes]] = []
    workdir = Path(tempfile.mkdtemp(prefix="autoclusters-bench-"))
    try:
        opa_port, hook_port = free_port(), free_port()
        procs.append(subprocess.Popen([binary, "run", "--server", f"--addr=127.0.0.1:{opa_port}", "--log-level=error",
                                       *(["--set=decision_logs.console=true"] if args.decision_logs else []),
                                       *opa.load_args(policies)[:-2],
                                       str(policies)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_http(f"http://127.0.0.1:{opa_port}/health")
        with open(workdir / "webhook.log", "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "autoclusters.cli.main", "webhook", "run", "--listen", "127.0.0.1",
                 "--port", str(hook_port), "--opa-url", f"http://127.0.0.1:{opa_port}",
                 "--cert-dir", str(workdir / "certs"), "--hosts", "127.0.0.1", "--webhook-config", ""],
                stdout=log, stderr=subprocess.STDOUT))
        for _ in range(100):
            if (workdir / "certs" / "ca.crt").exists():
                break
            time.sleep(0.1)
        ctx = ssl.create_default_context(cafile=str(workdir / "certs" / "ca.crt"))
        servers = {"opa": procs[0], "webhook": procs[1]}
        wait_http(f"https://127.0.0.1:{hook_port}/readyz", context=ctx)

        results: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg()}
        bench = opa_bench(binary, policies, opa_input(samples[-1][0]["request"]))
        results["review_bytes"] = len(json.dumps(samples[0][0]))
        results["opa_bench"] = bench
        print(f"review size {results['review_bytes']} bytes; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs")
        print(f"OPA evaluation alone (opa bench, in-process, {bench['iterations']} iterations): "
              f"{bench['ns_per_op'] / 1000:.0f} µs/op; eval p50 {bench['eval_p50_us']:.0f} µs, "
              f"p99 {bench['eval_p99_us']:.0f} µs")
        for name, url, ctx_, wrap in (
                ("opa-http", f"http://127.0.0.1:{opa_port}/v1/data/autoclusters/admission/decision", None, True),
                ("webhook", f"https://127.0.0.1:{hook_port}/validate", ctx, False)):
            asyncio.run(settle(url, ctx_, wrap, samples))
            before = {n: cpu_seconds(p.pid) for n, p in servers.items()}
            serial = asyncio.run(run_serial(url, args.serial, samples, ctx_, wrap))
            # CPU per review barely depends on how busy the machine is, unlike latency.
            serial["cpu_us_per_review"] = {n: (cpu_seconds(p.pid) - before[n]) / args.serial * 1e6
                                           for n, p in servers.items()}
            results[f"{name} serial"] = serial
            cpu = ", ".join(f"{n} {v:.0f} µs" for n, v in serial["cpu_us_per_review"].items() if v > 0)
            print(f"\n{name}, one at a time ({serial['requests']}): p50 {serial['p50_ms']:.2f} ms, "
                  f"p99 {serial['p99_ms']:.2f} ms; CPU per review: {cpu}")
            rows = []
            print(f"{name}: rate/s  answered  errors  p50 ms  p99 ms  max ms  wrong allows  wrong denials")
            for rate in rates:
                asyncio.run(settle(url, ctx_, wrap, samples))
                r = asyncio.run(run_rate(url, rate, args.seconds, samples, ctx_, wrap))
                rows.append(r)
                print(f"{'':>{len(name)}}  {r['rate']:>6}  {r['answered']:>8}  {r['errors']:>6}  {r['p50_ms']:>6.2f}  "
                      f"{r['p99_ms']:>6.2f}  {r['max_ms']:>6.1f}  {r['wrong_allows']:>12}  {r['wrong_denials']:>13}")
            results[name] = rows
        results["load_avg_after"] = os.getloadavg()
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        bad = sum(r["wrong_allows"] for r in results["webhook"])
        return 1 if bad else 0
    finally:
        for p in reversed(procs):
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
