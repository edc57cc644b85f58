"""``autoclusters_repairs_open{pool,phase}`` and ``..._open_oldest_seconds``: the repairs that
are not history, and how long the oldest has waited in its phase, read from the record cache
at each scrape (the alerts on repairs waiting for approval or for a person read them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from autoclusters.clock import FakeClock, utc_iso
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.controller.controller_metrics import open_repairs
from autoclusters.controller.manager import Controller
from autoclusters.controller.shards import shard_of
from autoclusters.names import Names
from tests.unit import builders
from tests.unit.fakeapi import FakeApi

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def record(name: str, pool: str, phase: str | None, *, entered: datetime | None = None,
           created: datetime = NOW - timedelta(hours=9)) -> dict[str, Any]:
    steps = [("Scheduled", utc_iso(created), "")]
    if phase is not None and entered is not None:
        steps.append((phase, utc_iso(entered), ""))
    return builders.record(name, f"node-{name}", pool, phase=phase, created=utc_iso(created), steps=steps, rv="1")


def test_counts_open_repairs_by_pool_and_phase_with_the_oldest_wait_in_the_phase() -> None:
    records = [
        record("r1", "a100", "AwaitingApproval", entered=NOW - timedelta(hours=5)),
        record("r2", "a100", "AwaitingApproval", entered=NOW - timedelta(minutes=10)),
        record("r3", "a100", "Acting", entered=NOW - timedelta(seconds=30)),
        record("r4", "h100", "HumanNeeded", entered=NOW - timedelta(hours=2)),
        record("r5", "h100", "Scheduled"),  # no step of its own phase after the first: since created
        record("r6", "h100", "Succeeded", entered=NOW - timedelta(days=3)),  # history
        record("r7", "h100", "Closed", entered=NOW - timedelta(days=1)),  # history
        record("r8", "h100", None),  # just created, no phase yet
    ]
    assert open_repairs(records, NOW) == {
        ("a100", "AwaitingApproval"): (2, 5 * 3600.0),
        ("a100", "Acting"): (1, 30.0),
        ("h100", "HumanNeeded"): (1, 2 * 3600.0),
        ("h100", "Scheduled"): (1, 9 * 3600.0),
    }


def _controller(shards: int = 1, shard: int = 0) -> Controller:
    return Controller(FakeApi().kube(), ControllerConfig(metrics_port=0, shards=shards, shard=shard),
                      names=Names(), clock=FakeClock(NOW))


def test_the_controller_exports_its_cached_records_and_nothing_once_they_are_history() -> None:
    ctl = _controller()

    def sample(name: str, pool: str, phase: str) -> float | None:
        return ctl.metrics.registry.get_sample_value(name, {"pool": pool, "phase": phase})

    assert sample("autoclusters_repairs_open", "a100", "AwaitingApproval") is None  # nothing cached: no series
    ctl.fleet.record_informer.upsert(record("r1", "a100", "AwaitingApproval", entered=NOW - timedelta(hours=7)))
    assert sample("autoclusters_repairs_open", "a100", "AwaitingApproval") == 1
    assert sample("autoclusters_repairs_open_oldest_seconds", "a100", "AwaitingApproval") == 7 * 3600
    closed = record("r1", "a100", "Closed", entered=NOW)
    closed["metadata"]["resourceVersion"] = "2"
    ctl.fleet.record_informer.upsert(closed)
    assert sample("autoclusters_repairs_open", "a100", "AwaitingApproval") is None


def test_a_shard_exports_only_its_own_pools_repairs() -> None:
    pools = [f"pool-{i}" for i in range(8)]
    mine = [p for p in pools if shard_of(p, 2) == 0]
    theirs = [p for p in pools if shard_of(p, 2) == 1]
    assert mine and theirs
    ctl = _controller(shards=2, shard=0)
    for i, pool in enumerate(pools):
        ctl.fleet.record_informer.upsert(record(f"r{i}", pool, "Failed", entered=NOW))
    exported = {s.labels["pool"] for family in ctl.metrics.registry.collect() for s in family.samples
                if s.name == "autoclusters_repairs_open"}
    assert exported == set(mine)
