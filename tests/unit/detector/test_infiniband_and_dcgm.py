"""The state sources (InfiniBand sysfs, DCGM) against recorded shapes of their inputs (NVML: test_nvml.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoclusters.clock import FakeClock
from autoclusters.detector.dcgm import DcgmSource, health_output, parse_health
from autoclusters.detector.infiniband import InfinibandConfig, InfinibandSource
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
