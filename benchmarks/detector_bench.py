"""Detector benchmark: kernel log parser throughput, and the agent's idle memory and CPU.

    .venv/bin/python benchmarks/detector_bench.py [--lines 1000000] [--kubeconfig PATH --node NAME]
                                                  [--idle-seconds 60] [-o json]

Throughput: a synthetic kernel log of ordinary kernel lines with 1 % driver fault lines
(every catalogued Xid and SXid code) goes through the same call the agent makes per line
(``KernelLogInterpreter.record``); a second run uses only fault lines, the worst case, and a
third the same fault lines in dmesg, journal and syslog framings (the parser's slow path).
Idle: ``autoclusters detector run`` is started as a subprocess for one node
(a kernel log file, no NVML/DCGM/InfiniBand on this machine), given a warm-up, then its
RSS is read from /proc and its CPU time is sampled over ``--idle-seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoclusters.detector.kernel_log import KernelLogInterpreter, format_sxid_line, format_xid_line, kmsg_record
from autoclusters.detector.pci import SIMULATED_GPU_BUS_IDS, GpuIndex
from autoclusters.faults.catalog import FaultClass, load_catalog

NOISE = [
    "6,{seq},{usec},-;mlx5_core 0000:4b:00.0: mlx5_pcie_event:301:(pid 1032): PCIe slot advertised sufficient power",
    "6,{seq},{usec},-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "4,{seq},{usec},-;audit: type=1400 audit(1732867923.123:88): apparmor=\"DENIED\" operation=\"open\"",
    "6,{seq},{usec},-;EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none.",
    "6,{seq},{usec},-;nvidia-uvm: Loaded the UVM driver, major device number 510.",
    "5,{seq},{usec},-;NVRM: GPU at PCI:0000:3b:00: GPU-6f2b1c0e-5d7a-4f0e-9c51-7a3f0d2e9b10",
    "6,{seq},{usec},-;cni0: port 3(veth4c1a2b3d) entered forwarding state",
]


# Framings other than /dev/kmsg's (the parser's slow path): dmesg, dmesg --decode, journalctl
# short and short-iso, an rsyslog file line with the kernel's stamp kept.
FRAMINGS = [
    "[{sec:>5}.{usec:06d}] {text}",
    "kern  :err   : [{sec:>5}.{usec:06d}] {text}",
    "Nov 29 08:12:03.{usec:06d} gpu-node-17 kernel: {text}",
    "2026-11-29T08:12:03+0000 gpu-node-17 kernel: {text}",
    "Nov  9 08:12:03 gpu-node-17 kernel: [{sec:>5}.{usec:06d}] {text}",
]


def framed(lines: list[str]) -> list[str]:
    """The same kernel messages in the other framings, in turn."""
    out = []
    for i, line in enumerate(lines):
        text = line.split(";", 1)[1]
        out.append(FRAMINGS[i % len(FRAMINGS)].format(sec=i // 1000, usec=i % 1000 * 1000, text=text))
    return out


def corpus(n: int, fault_share: float, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    cat = load_catalog()
    xids = [int(e.code) for e in cat.of_class(FaultClass.GPU) if e.code.isdigit()]
    sxids = [int(e.code) for e in cat.of_class(FaultClass.NVSWITCH)]
    out = []
    for i in range(n):
        if rng.random() < fault_share:
            if rng.random() < 0.8:
                text = format_xid_line(rng.choice(SIMULATED_GPU_BUS_IDS), rng.choice(xids), "fault text here")
            else:
                text = format_sxid_line(rng.randrange(6), "0000:c4:00", rng.choice(sxids), "Link 4 fault")
            out.append(kmsg_record(i, i * 1000, text))
        else:
            out.append(rng.choice(NOISE).format(seq=i, usec=i * 1000))
    return out


def throughput(lines: list[str]) -> tuple[float, float, int]:
    """Lines per CPU second of this thread, lines per wall second, faults found.

    CPU time is the figure to compare: on a shared machine wall time mostly measures how
    much of a core the scheduler gave the benchmark.
    """
    interp = KernelLogInterpreter(load_catalog(), GpuIndex.simulated())
    record = interp.record
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    found = 0
    for line in lines:
        if record(line) is not None:
            found += 1
    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    return len(lines) / cpu, len(lines) / wall, found


def _proc_stat(pid: int) -> tuple[float, int]:
    """CPU seconds (user+system, children excluded) and RSS in KiB."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS"))
    return cpu, rss


def idle(kubeconfig: str, node: str, seconds: float, warmup: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kmsg"
        log.write_text("\n".join(corpus(2000, 0.0)) + "\n")
        cmd = [sys.executable, "-m", "autoclusters.cli.main", "detector", "run", "--kubeconfig", kubeconfig,
               "--node", node, "--kernel-log", str(log), "--sys-infiniband", f"{tmp}/no-ib",
               "--nvidia-proc", f"{tmp}/no-proc", "--dcgm-command", "no-such-dcgmi", "--no-nvml"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(warmup)
            if proc.poll() is not None:
                raise RuntimeError(f"the agent exited: {proc.stderr.read() if proc.stderr else ''}")
            cpu0, _ = _proc_stat(proc.pid)
            t0 = time.monotonic()
            peak = 0
            while time.monotonic() - t0 < seconds:
                time.sleep(1)
                peak = max(peak, _proc_stat(proc.pid)[1])
            cpu1, rss = _proc_stat(proc.pid)
            elapsed = time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait(10)
    return {"rss_mib": rss / 1024, "peak_rss_mib": peak / 1024, "cpu_percent_of_core": 100 * (cpu1 - cpu0) / elapsed,
            "seconds": elapsed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--kubeconfig", help="measure idle RSS/CPU of an agent writing to this cluster")
    ap.add_argument("--node", help="the node the measured agent reports on (must exist)")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    mixed = corpus(args.lines, 0.01)
    rate, rate_wall, found = throughput(mixed)
    faults_only = corpus(max(args.lines // 10, 1000), 1.0)
    worst, worst_wall, _ = throughput(faults_only)
    worst_framed, worst_framed_wall, found_framed = throughput(framed(faults_only))
    assert found_framed == len(faults_only), "a framing the parser does not read"
    result: dict[str, object] = {"lines": len(mixed), "fault_lines": found, "lines_per_cpu_s": round(rate),
                                 "lines_per_wall_s": round(rate_wall), "fault_lines_per_cpu_s": round(worst),
                                 "fault_lines_per_wall_s": round(worst_wall),
                                 "framed_fault_lines_per_cpu_s": round(worst_framed),
                                 "framed_fault_lines_per_wall_s": round(worst_framed_wall),
                                 "target_lines_per_s": 200_000}
    if args.kubeconfig and args.node:
        result["idle"] = idle(args.kubeconfig, args.node, args.idle_seconds, args.warmup)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(f"parser, 1% fault mix: {rate:,.0f} lines per CPU second ({rate_wall:,.0f} per wall second; "
              f"{found} faults in {len(mixed):,} lines); target 200,000")
        print(f"parser, fault lines only: {worst:,.0f} lines per CPU second ({worst_wall:,.0f} per wall second)")
        print(f"parser, fault lines only, dmesg/journal/syslog framings: {worst_framed:,.0f} lines per CPU second "
              f"({worst_framed_wall:,.0f} per wall second)")
        if "idle" in result:
            i = result["idle"]
            assert isinstance(i, dict)
            print(f"idle agent: RSS {i['rss_mib']:.1f} MiB (peak {i['peak_rss_mib']:.1f}), "
                  f"CPU {i['cpu_percent_of_core']:.2f}% of a core over {i['seconds']:.0f}s (targets 40 MiB, 1%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
