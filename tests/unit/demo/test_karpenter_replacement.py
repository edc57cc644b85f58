"""The demo's Karpenter timeline: a NodeClaim's stages in the order they happened."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from autoclusters.demo import karpenter_replacement as kdemo
from autoclusters.providers.karpenter import nodeclaims_path
from tests.unit.builders import nodeclaim
from tests.unit.fakeapi import FakeApi


def _stage(kind: str, at: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "lastTransitionTime": f"2026-11-30T{at}Z"}


def test_timeline_lists_new_nodeclaims_in_the_order_they_live(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi()
    api.put(nodeclaims_path(), nodeclaim("old", kdemo.POOL, created="2026-11-30T12:00:00Z"))
    api.put(nodeclaims_path(), nodeclaim("c1", kdemo.POOL, "n1", created="2026-11-30T12:08:40Z", conditions=[
        _stage("Initialized", "12:08:43"), _stage("Launched", "12:08:40"), _stage("Ready", "12:08:43"),
        _stage("Registered", "12:08:41")]))
    api.put(nodeclaims_path(), nodeclaim("other-pool", "cpu", "n9", created="2026-11-30T12:08:50Z"))
    handle = SimpleNamespace(kube=api.kube())
    kdemo.karpenter_timeline(handle, datetime(2026, 11, 30, 12, 8, 31, tzinfo=UTC))  # type: ignore[arg-type]
    lines = [line.split("s  ", 1)[1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert lines == ["NodeClaim c1 created", "NodeClaim c1 Launched (node n1)", "NodeClaim c1 Registered (node n1)",
                     "NodeClaim c1 Initialized (node n1)"]  # the older one and another pool's are not this repair's
