"""The local cluster's node heartbeats: kwok's configuration and the controller-manager's grace
period follow the settings (a kubelet's defaults unless told otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoclusters.devcluster.heartbeats import (
    HEARTBEAT_STAGE,
    KUBELET_LEASE_SECONDS,
    KUBELET_STATUS_REPORT_SECONDS,
    Heartbeats,
)
from autoclusters.sim.hosts import KWOK_STAGES


def _stage(docs: list[dict], name: str) -> dict:
    return next(d for d in docs if d["kind"] == "Stage" and d["metadata"]["name"] == name)


def test_defaults_are_a_kubelets() -> None:
    hb = Heartbeats()
    assert (hb.lease_seconds, hb.status_seconds) == (40, 300)
    assert (KUBELET_LEASE_SECONDS, KUBELET_STATUS_REPORT_SECONDS) == (40, 300)
    assert hb.renew_seconds == 10
    # kube-controller-manager's own default for a kubelet's 40 s lease
    assert hb.controller_manager_flags() == ["--node-monitor-grace-period=50s"]
    assert hb.kwok_flags() == ["--node-lease-duration-seconds=40"]


def test_kwok_config_carries_the_status_interval_and_the_lease(tmp_path: Path) -> None:
    hb = Heartbeats(lease_seconds=8, status_seconds=20)
    docs = list(yaml.safe_load_all(hb.write_kwok_config(tmp_path / "kwok.yaml").read_text()))
    config = next(d for d in docs if d["kind"] == "KwokConfiguration")
    assert config["options"]["nodeLeaseDurationSeconds"] == 8
    # more workers than kwok's 4 for the Leases and for the node stages (heartbeats, reboots)
    assert config["options"]["nodeLeaseParallelism"] > 4
    assert config["options"]["nodePlayStageParallelism"] > 4
    assert _stage(docs, HEARTBEAT_STAGE)["spec"]["delay"] == {"durationMilliseconds": 20000,
                                                             "jitterDurationMilliseconds": 22000}
    assert hb.controller_manager_flags() == ["--node-monitor-grace-period=18s"]
    # every other stage is the file's, unchanged
    original = {d["metadata"]["name"]: d for d in yaml.safe_load_all(KWOK_STAGES.read_text()) if d}
    rendered = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage"}
    assert set(rendered) == set(original)
    for name, stage in original.items():
        if name != HEARTBEAT_STAGE:
            assert rendered[name] == stage


def test_the_grace_period_outlasts_the_lease() -> None:
    for lease in (4, 10, 40, 120):
        hb = Heartbeats(lease_seconds=lease)
        assert hb.grace_seconds > hb.lease_seconds > 3 * hb.renew_seconds


@pytest.mark.parametrize("kwargs", [{"lease_seconds": 3}, {"status_seconds": 0}])
def test_rejects_settings_kwok_cannot_run(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Heartbeats(**kwargs)
