"""The GPU check's steps (``tools/gpu-check.sh`` runs them; docs/benchmarks/detector.md says how).

    gpu_check.py all                 every step below, in order, each with its own timeout
    gpu_check.py nvml                (a child of ``all``) the NVML source once
    gpu_check.py crash VIA           (a child of ``all``) an illegal-address kernel through
                                     VIA: cupy, torch or driver (ctypes on libcuda.so.1)

It uses the detector's own code (the NVML source's ``read_once``, the kernel log parser, the
catalog), imported from this checkout; the few pure-Python packages those need and a machine
may lack (PyYAML, nvidia-ml-py) come from ``build/gpu-check/site`` (``gpu-check.sh prepare``),
searched after the machine's own. It reads the kernel log (``/dev/kmsg`` read-only, else
``dmesg``) and never writes to it. Everything it cannot read is said, and it exits 0 unless
the check itself broke.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "build" / "gpu-check" / "site"
sys.path.insert(0, str(REPO))
sys.path.append(str(SITE))  # after the machine's own packages: only what it lacks

NVML_TIMEOUT_S = 45  # each NVML step, in a child (a GPU that hangs NVML stops only that step)
CRASH_TIMEOUT_S = 60  # each way to the faulty kernel
CUDA_ILLEGAL_ADDRESS = 700  # CUDA_ERROR_ILLEGAL_ADDRESS (cuda.h)
# A kernel that stores to device address 0x10, which no allocation owns: an MMU fault
# (Xid 31 on current drivers), a CUDA "illegal address" error for the process. PTX, so the
# driver compiles it (no NVRTC or nvcc needed).
PTX = """
.version 6.0
.target sm_50
.address_size 64
.visible .entry bad()
{
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  mov.u64 %rd1, 16;
  mov.u32 %r1, 1;
  st.global.u32 [%rd1], %r1;
  ret;
}
"""

unreadable: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)


def missing(what: str, why: object) -> None:
    unreadable.append(f"{what}: {why}")
    say(f"  could not read {what}: {why}")


def section(title: str) -> None:
    say(f"\n== {title}")


# --- environment -----------------------------------------------------------------------
def environment() -> None:
    section("environment")
    say(f"  python {platform.python_version()} ({sys.executable}); {platform.platform()}")
    for mod in ("pynvml", "yaml", "torch", "cupy"):
        try:
            m = __import__(mod)
        except Exception as e:  # noqa: BLE001 - any failure to import is a module this check cannot use
            missing(f"module {mod}", repr(e))
            continue
        where = "build/gpu-check/site" if str(SITE) in str(getattr(m, "__file__", "")) else "this machine"
        say(f"  {mod} {getattr(m, '__version__', '?')} (from {where})")
    version = Path("/proc/driver/nvidia/version")
    try:
        say("  /proc/driver/nvidia/version: " + version.read_text().splitlines()[0])
    except OSError as e:
        missing("/proc/driver/nvidia/version", e)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        say("  nvidia-smi: " + (out.stdout.strip().replace("\n", "; ") or out.stderr.strip()))
    except (OSError, subprocess.TimeoutExpired) as e:
        missing("nvidia-smi", e)


# --- NVML ------------------------------------------------------------------------------
def nvml(label: str) -> dict[str, Any] | None:
    """The NVML step in a child process with a timeout; its data (from its ``json:`` line)."""
    section(f"NVML source, {label} (the detector's read_once: state, inventory, one poll)")
    try:
        res = subprocess.run([sys.executable, __file__, "nvml"], capture_output=True, text=True,
                             timeout=NVML_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        say(e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
        missing(f"NVML ({label})", f"timed out after {NVML_TIMEOUT_S} s")
        return None
    say(res.stdout.rstrip())
    data = None
    for line in res.stdout.splitlines():
        if line.startswith("  could not read "):
            unreadable.append(line.removeprefix("  could not read "))
        elif line.startswith("  json: "):
            data = json.loads(line.removeprefix("  json: "))
        elif line.startswith("  unreadable: ") and line != "  unreadable: nothing":
            unreadable.append("NVML " + line.removeprefix("  unreadable: "))
    if res.returncode != 0:
        missing(f"NVML ({label})", (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1])
    return data


def nvml_child() -> int:
    try:
        from autoclusters.detector.nvml import driver_lists_gpus, read_once
        from autoclusters.detector.nvml_inventory import render_text
        from autoclusters.faults.catalog import load_catalog
    except Exception as e:  # noqa: BLE001 - an interpreter older than 3.11, a missing package
        missing("the detector's modules", repr(e))
        return 0
    data = read_once(load_catalog(), expect_gpus=driver_lists_gpus("/proc/driver/nvidia/gpus"))
    state = data["state"]
    say(f"  state: {state['status']}" + (f" ({state['reason']})" if state["reason"] else "")
        + f"; expected: {state['expected']}")
    say(f"  library: {data['library']}")
    if data["inventory"] is not None:
        say("  " + render_text(data["inventory"]).replace("\n", "\n  "))
    else:
        missing("NVML", state["reason"])
    poll = data["poll"]
    say(f"  poll: {poll['error'] or str(len(poll['records'])) + ' finding(s)'}")
    for r in poll["records"]:
        say(f"    {r['subject']}: {r['code']} ({r['severity']}) {r['detail']}".rstrip())
    say("  json: " + json.dumps(data, sort_keys=True))
    return 0


# --- the kernel log (read only) -----------------------------------------------------------
class KernelLog:
    """The driver's fault lines logged since ``mark()``, as the detector reads them: its own
    ``/dev/kmsg`` source (the first read drains every record since boot, the next returns
    the new ones), else the new lines of ``dmesg`` through the detector's interpreter."""

    def __init__(self, bus_index: dict[str, int]) -> None:
        from autoclusters.detector.kernel_log import KernelLogInterpreter
        from autoclusters.detector.kmsg import DevKmsgSource
        from autoclusters.detector.pci import GpuIndex
        from autoclusters.faults.catalog import load_catalog

        self.interp = KernelLogInterpreter(load_catalog(), GpuIndex(bus_index))
        self.kmsg = DevKmsgSource(self.interp)
        self.how = ""
        self.dmesg_lines = 0

    def _dmesg(self) -> list[str]:
        res = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise OSError(res.stderr.strip() or f"dmesg exited {res.returncode}")
        return res.stdout.splitlines()

    def mark(self) -> None:
        first = self.kmsg.poll()
        if first.ok:
            self.how = "/dev/kmsg"
            return
        try:
            self.dmesg_lines = len(self._dmesg())
            self.how = "dmesg"
        except (OSError, subprocess.TimeoutExpired) as e:
            missing("the kernel log", f"{first.error}; dmesg: {e}")

    def new(self) -> list[Any]:
        """The detector's records of the driver lines logged since the mark."""
        if self.how == "/dev/kmsg":
            poll = self.kmsg.poll()
            if poll.error:
                missing("/dev/kmsg", poll.error)
            return list(poll.records)
        if self.how == "dmesg":
            lines = self._dmesg()[self.dmesg_lines:]
            return [r for r in map(self.interp.record, lines) if r is not None]
        return []


def classify(records: list[Any]) -> None:
    """Shows each record and what the catalog says about its code."""
    from autoclusters.faults.catalog import load_catalog

    catalog = load_catalog()
    for r in records:
        say(f"  {r.subject}: {r.fault_class} {r.code} {r.name!r}, severity {r.severity}, known: {r.known}"
            + (f", {r.detail}" if r.detail else ""))
        entry = catalog.lookup(r.fault_class, r.code)
        if entry is None:
            say("    catalog: not listed (the catalog's rule for unknown codes applies)")
            continue
        fields = {k: str(v) for k, v in dataclasses.asdict(entry).items()}
        say(f"    catalog: {json.dumps(fields, sort_keys=True)}")
        say(f"    repair: {'none (an application error)' if str(entry.action) == 'none' else entry.action}")


# --- the faulty kernel -----------------------------------------------------------------
def crash(via: str) -> int:
    """Runs the illegal-address kernel through ``via``; prints the CUDA error it ends in."""
    ptx = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-check-{os.getpid()}.ptx"
    ptx.write_text(PTX)
    try:
        if via == "cupy":
            import cupy

            fn = cupy.RawModule(path=str(ptx)).get_function("bad")
            fn((1,), (1,), ())
            cupy.cuda.Device().synchronize()
        elif via == "torch":
            import torch

            torch.zeros(1, device="cuda")  # PyTorch's context is the current one for the driver calls
            torch.cuda.synchronize()
            return _driver_launch(ptx, own_context=False)
        else:
            return _driver_launch(ptx, own_context=True)
    except Exception as e:  # noqa: BLE001 - the CUDA error this step is after, or why it could not run
        print(f"{via}: {type(e).__name__}: {e}", flush=True)
        return 0 if "illegal" in str(e).lower() else 3
    finally:
        ptx.unlink(missing_ok=True)
    print(f"{via}: the kernel ran without an error", flush=True)
    return 4


def _driver_launch(ptx: Path, *, own_context: bool) -> int:
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")

    def check(name: str, *args: Any) -> int:
        r = int(getattr(cuda, name)(*args))
        if r and name != "cuCtxSynchronize":
            raise RuntimeError(f"{name} returned CUDA error {r}")
        return r

    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check("cuInit", 0)
    if own_context:
        check("cuDeviceGet", ctypes.byref(dev), 0)
        check("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
    check("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(PTX.encode()))
    check("cuModuleGetFunction", ctypes.byref(fn), mod, b"bad")
    check("cuLaunchKernel", fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    r = check("cuCtxSynchronize")
    via = "driver" if own_context else "torch"
    if r == CUDA_ILLEGAL_ADDRESS:
        print(f"{via}: cuCtxSynchronize: CUDA error {r} (an illegal memory access was encountered)", flush=True)
        return 0
    print(f"{via}: cuCtxSynchronize returned {r}", flush=True)
    return 4


def faulty_kernel(bus_index: dict[str, int]) -> None:
    section("an illegal-address kernel in a child process, then the kernel log")
    try:
        log = KernelLog(bus_index)
    except Exception as e:  # noqa: BLE001 - the detector's modules do not import here
        missing("the kernel log through the detector", repr(e))
        return
    log.mark()
    if log.how:
        say(f"  kernel log: {log.how}, read only")
    ran = False
    for via in ("cupy", "torch", "driver"):
        try:
            res = subprocess.run([sys.executable, __file__, "crash", via], capture_output=True, text=True,
                                 timeout=CRASH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            missing(f"the faulty kernel through {via}", f"timed out after {CRASH_TIMEOUT_S} s")
            continue
        text = (res.stdout + res.stderr).strip().splitlines()
        say(f"  through {via}: exit {res.returncode}: {text[-1] if text else ''}")
        if res.returncode == 0:
            ran = True
            break
        missing(f"the faulty kernel through {via}", text[-1] if text else f"exit {res.returncode}")
    if not ran or not log.how:
        return
    new: list[Any] = []
    for _ in range(10):  # the driver logs the Xid within moments of the fault
        time.sleep(1)
        new += log.new()
        if new:
            time.sleep(1)  # the lines that follow the first (Xid 13/43 after 31)
            new += log.new()
            break
    say(f"  new driver fault lines in {log.how}: {len(new)}")
    classify(new)
    if not new:
        missing("an Xid line after the fault", f"none in {log.how} within 10 s")


def main(argv: list[str]) -> int:
    if argv[:1] == ["crash"]:
        return crash(argv[1] if len(argv) > 1 else "driver")
    if argv[:1] == ["nvml"]:
        return nvml_child()
    start = time.monotonic()
    say(f"GPU check, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, checkout {REPO}")
    environment()
    before = nvml("before")
    buses: dict[str, int] = {}
    if before and before["inventory"]:
        from autoclusters.detector.pci import normalize

        for g in before["inventory"]["gpus"]:
            bus = normalize(g.get("pciBusId") or "")
            if bus:
                buses[bus] = g["index"]
    faulty_kernel(buses)
    nvml("after the faulty kernel (an application error leaves no NVML fault)")
    section("could not read")
    for u in dict.fromkeys(unreadable):  # once each, in the order met
        say(f"  {u}")
    if not unreadable:
        say("  nothing")
    say(f"\ndone in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
