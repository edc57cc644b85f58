"""The demo's Karpenter timeline: a NodeClaim's stages in the order they happened."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters.demo import karpenter_replacement as kdemo


class _Kube:
    def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return [
            {"metadata": {"name": "old", "creationTimestamp": "2026-11-30T12:00:00Z"}, "status": {}},
            {"metadata": {"name": "c1", "creationTimestamp": "2026-11-30T12:08:40Z"},
             "status": {"nodeName": "n1", "conditions": [
                 {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-30T12:08:43Z"},
                 {"type": "Launched", "status": "True", "lastTransitionTime": "2026-11-30T12:08:40Z"},
                 {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T12:08:43Z"},
                 {"type": "Registered", "status": "True", "lastTransitionTime": "2026-11-30T12:08:41Z"}]}}]


class _Handle:
    kube = _Kube()


def test_timeline_lists_new_nodeclaims_in_the_order_they_live(capsys: pytest.CaptureFixture[str]) -> None:
    kdemo.karpenter_timeline(_Handle(), datetime(2026, 11, 30, 12, 8, 31, tzinfo=UTC))  # type: ignore[arg-type]
    lines = [line.split("s  ", 1)[1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert lines == ["NodeClaim c1 created", "NodeClaim c1 Launched (node n1)", "NodeClaim c1 Registered (node n1)",
                     "NodeClaim c1 Initialized (node n1)"]  # the older NodeClaim is not part of this repair
