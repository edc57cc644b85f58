"""The state sources (InfiniBand sysfs, NVML, DCGM) against recorded shapes of their inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoclusters.clock import FakeClock
from autoclusters.detector.dcgm import DcgmSource, health_output, parse_health
from autoclusters.detector.infiniband import InfinibandConfig, InfinibandSource
from autoclusters.detector.nvml import NvmlSource
from autoclusters.faults.catalog import Severity, load_catalog

CAT = load_catalog()


# --- InfiniBand -------------------------------------------------------------------------
def port(root: Path, hca: str, n: int, state: str = "4: ACTIVE", phys: str = "5: LinkUp", **counters: int) -> None:
    base = root / hca / "ports" / str(n)
    (base / "counters").mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    (base / "phys_state").write_text(phys + "\n")
    for c in ("symbol_error", "link_downed", "port_rcv_errors"):
        (base / "counters" / c).write_text(f"{counters.get(c, 0)}\n")


def codes(poll: Any) -> list[tuple[str, str]]:
    return sorted((r.code, r.subject) for r in poll.records)


def test_no_infiniband_means_the_source_is_off(tmp_path: Path) -> None:
    p = InfinibandSource(CAT, FakeClock(), str(tmp_path / "absent")).poll()
    assert p.ok and p.snapshot and p.records == ()


def test_a_port_that_was_up_and_went_down_is_a_fault(tmp_path: Path) -> None:
    port(tmp_path, "mlx5_0", 1)
    port(tmp_path, "mlx5_1", 1, "1: DOWN", "3: Disabled")  # never up: unused, not a fault
    src = InfinibandSource(CAT, FakeClock(), str(tmp_path))
    assert codes(src.poll()) == []
    port(tmp_path, "mlx5_0", 1, "1: DOWN", "2: Polling")
    assert codes(src.poll()) == [("port_down", "HCA mlx5_0 port 1")]
    port(tmp_path, "mlx5_0", 1)
    assert codes(src.poll()) == []


def test_a_vanished_hca_is_a_fault(tmp_path: Path) -> None:
    port(tmp_path, "mlx5_0", 1)
    port(tmp_path, "mlx5_1", 1)
    src = InfinibandSource(CAT, FakeClock(), str(tmp_path))
    src.poll()
    import shutil

    shutil.rmtree(tmp_path / "mlx5_1")
    assert codes(src.poll()) == [("hca_missing", "HCA mlx5_1")]


def test_error_counters_over_threshold_within_the_window(tmp_path: Path) -> None:
    clock = FakeClock()
    port(tmp_path, "mlx5_0", 1, symbol_error=5)
    src = InfinibandSource(CAT, clock, str(tmp_path), InfinibandConfig(counter_window_s=60))
    src.poll()
    clock.advance(10)
    port(tmp_path, "mlx5_0", 1, symbol_error=50)
    assert codes(src.poll()) == []
    clock.advance(10)
    port(tmp_path, "mlx5_0", 1, symbol_error=200)
    assert codes(src.poll()) == [("link_errors", "HCA mlx5_0 port 1")]
    clock.advance(120)  # no new errors for longer than the window: healthy again
    assert codes(src.poll()) == []


def test_unreadable_sysfs_is_an_error_not_a_fault(tmp_path: Path) -> None:
    port(tmp_path, "mlx5_0", 1)
    src = InfinibandSource(CAT, FakeClock(), str(tmp_path))
    src.poll()
    (tmp_path / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error").write_text("garbage\n")
    p = src.poll()
    assert not p.ok and p.records == ()


# --- NVML ----------------------------------------------------------------------------------
class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """Answers like pynvml for a few GPUs; ``lost``/``fail`` make calls raise NVML errors."""

    NVMLError = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus: int = 2, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.ecc: dict[int, Any] = {}
        self.rows: dict[int, Any] = {}
        self.pending: dict[int, int] = {}
        self.links: dict[int, set[int]] = {i: {0, 1, 2, 3} for i in range(gpus)}
        self.lost: set[int] = set()
        self.fail_count: int | None = None

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        if self.fail_count is not None:
            raise NVMLError(self.fail_count)
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i in self.lost:
            raise NVMLError(15)
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return type("Pci", (), {"busId": f"00000000:{0x3b + h:02X}:00.0".encode()})()

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> Any:
        return self.ecc.get(h, 0)

    def nvmlDeviceGetRemappedRows(self, h: int) -> Any:
        if h in self.rows and self.rows[h] == "unsupported":
            raise NVMLError(3)
        return self.rows.get(h, (0, 0, 0, 0))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self.pending.get(h, 0)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 4:
            raise NVMLError(2)
        return 1 if link in self.links[h] else 0


def test_nvml_absent_is_off() -> None:
    for code, expect_gpus in ((12, False), (12, True), (9, False)):  # no library; no driver on a GPU-less node
        p = NvmlSource(FakeNvml(init_error=code), CAT, expect_gpus=expect_gpus).poll()
        assert p.ok and p.records == (), (code, expect_gpus)


def test_nvml_init_failure_on_a_gpu_node_is_an_error_not_a_fault() -> None:
    p = NvmlSource(FakeNvml(init_error=9), CAT, expect_gpus=True).poll()
    assert not p.ok and "NVML init failed" in (p.error or "") and p.records == ()


def test_nvml_findings() -> None:
    lib = FakeNvml(gpus=4)
    src = NvmlSource(lib, CAT, expect_gpus=True)
    assert codes(src.poll()) == []
    assert src.gpu_index().index_of("0000:3d:00") == 2
    lib.ecc[0] = 3
    lib.rows[1] = (0, 2, 0, 1)
    lib.pending[2] = 1
    lib.links[3] = {0, 1}
    lib.lost.add(2)
    assert codes(src.poll()) == [("GPU_LOST", "GPU 2"), ("NVLINK_DOWN", "GPU 3"), ("ROW_REMAP_FAILURE", "GPU 1"),
                                 ("VOLATILE_UNCORRECTABLE_ECC", "GPU 0")]


def test_odd_nvml_answers_are_not_faults() -> None:
    lib = FakeNvml(gpus=2)
    src = NvmlSource(lib, CAT, expect_gpus=True)
    src.poll()
    lib.ecc[0] = "lots"
    lib.ecc[1] = -5
    lib.rows[0] = "unsupported"
    lib.rows[1] = (None,)
    p = src.poll()
    assert p.ok and p.records == ()
    lib.fail_count = 999
    p = src.poll()
    assert not p.ok and p.records == ()


# --- DCGM ----------------------------------------------------------------------------------
def test_dcgm_incidents_by_code_and_by_message(tmp_path: Path) -> None:
    out = tmp_path / "dcgm.json"
    out.write_text(health_output([(5, "DCGM_FR_NVLINK_DOWN", "GPU 5's NvLink link 3 is currently down")]))
    recs = DcgmSource(CAT, output_file=str(out)).poll().records
    assert [(r.code, r.subject, r.severity) for r in recs] == [("DCGM_FR_NVLINK_DOWN", "GPU 5", Severity.FATAL)]
    doc = {"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": {"GPU ID: 1": {"children": {
        "Memory": {"children": {"Health": {"value": "Failure"},
                                "Error": {"value": "Detected 2 volatile double-bit ECC error(s) in GPU 1."}}},
        "PCIe": {"children": {"Health": {"value": "Healthy"}}}}}}}}}
    assert [(g, c) for g, c, _ in parse_health(json.dumps(doc))] == [(1, "DCGM_FR_VOLATILE_DBE_DETECTED")]


def test_dcgm_healthy_absent_and_broken(tmp_path: Path) -> None:
    out = tmp_path / "dcgm.json"
    out.write_text(health_output([]))
    assert DcgmSource(CAT, output_file=str(out)).poll().records == ()
    assert DcgmSource(CAT, output_file=str(tmp_path / "none")).poll().ok  # not installed: off
    assert DcgmSource(CAT, command=("no-such-dcgmi-binary",)).poll().ok
    out.write_text("Error: unable to connect to host engine")
    p = DcgmSource(CAT, output_file=str(out)).poll()
    assert not p.ok and p.records == ()


@pytest.mark.parametrize("script", ["exit 1", "echo '{not json'"])
def test_a_failing_dcgmi_is_an_error(tmp_path: Path, script: str) -> None:
    fake = tmp_path / "dcgmi"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    p = DcgmSource(CAT, command=(str(fake), "health", "-c", "-j"), host="127.0.0.1").poll()
    assert not p.ok and p.records == ()
