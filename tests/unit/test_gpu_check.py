"""tools/gpu-check.sh without a GPU: it says what it could not read and exits cleanly; with
the stand-in libnvidia-ml.so.1 on the loader's path its NVML part reads the stand-in's GPUs;
and a driver line is classified as the catalog says."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from autoclusters.detector.kernel_log import KernelLogInterpreter, format_xid_line, kmsg_record
from autoclusters.detector.pci import GpuIndex
from autoclusters.faults.catalog import FaultClass, load_catalog
from tests.nvml_stub import REPO, STATE_ENV, State, build, gpus

SCRIPT = REPO / "tools" / "gpu-check.sh"


def gpu_check_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "tools" / "gpu_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prepare_then_run_without_a_gpu_says_what_it_could_not_read(tmp_path: Path) -> None:
    stub = build(tmp_path / "lib")
    state = tmp_path / "state"
    State(gpus(2), driver="550.90.07").write(state)
    prep = subprocess.run([str(SCRIPT), "prepare"], capture_output=True, text=True, timeout=120)
    assert prep.returncode == 0, prep.stderr
    assert (REPO / "build" / "gpu-check" / "site" / "yaml" / "__init__.py").is_file()
    result = tmp_path / "out" / "gpu-check.txt"
    env = {**os.environ, STATE_ENV: str(state), "LD_LIBRARY_PATH": str(stub.parent),
           "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    env.pop("OUT", None)
    res = subprocess.run([str(SCRIPT), "run", str(result)], capture_output=True, text=True, env=env, timeout=280)
    assert res.returncode == 0, res.stdout + res.stderr
    text = result.read_text()
    assert "  state: on; expected: " in text and "driver version: 550.90.07" in text and "GPUs: 2" in text
    assert "  library: libnvidia-ml.so.1 from loader" in text
    # no CUDA here: every way to the faulty kernel is named with why it did not run
    could_not = text.split("== could not read", 1)[1]
    for via in ("cupy", "torch", "driver"):
        assert f"the faulty kernel through {via}: " in could_not
    assert "done in " in text


def test_a_driver_line_is_classified_by_the_catalog() -> None:
    mod = gpu_check_module()
    catalog = load_catalog()
    entry = catalog.lookup(FaultClass.GPU, 31)
    assert entry is not None
    line = kmsg_record(900, 1, format_xid_line("0000:3b:00", 31, "Ch 00000008, intr 00000000. MMU Fault"))
    record = KernelLogInterpreter(catalog, GpuIndex({"0000:3b:00": 3})).record(line)
    assert record is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mod.classify([record])
    text = out.getvalue()
    assert text.startswith(f"  GPU 3: gpu 31 {entry.name!r}, severity {entry.severity}, known: True"), text
    expected = "none (an application error)" if str(entry.action) == "none" else str(entry.action)
    assert f"repair: {expected}" in text and '"code": "31"' in text


@pytest.mark.parametrize("via", ["cupy", "torch", "driver"])
def test_the_faulty_kernel_fails_cleanly_without_cuda(via: str) -> None:
    """Here no CUDA: the child exits non-zero with the reason (on a GPU machine: 0 and the CUDA error)."""
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    res = subprocess.run(["python3", str(REPO / "tools" / "gpu_check.py"), "crash", via], capture_output=True,
                         text=True, timeout=60, env=env)
    if res.returncode == 0:  # a machine with CUDA: the fault happened, as on the GPU machine
        assert "illegal" in res.stdout.lower(), res.stdout
    else:
        assert res.returncode == 3 and res.stdout.startswith(f"{via}: "), res.stdout + res.stderr
