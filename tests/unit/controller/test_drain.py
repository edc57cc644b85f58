"""The drain's pod rules (those kubectl drain applies)."""

from __future__ import annotations

from autoclusters.controller import drain
from autoclusters.names import Names

NAMES = Names()


def test_drain_skips_daemonset_and_mirror_pods() -> None:
    ds = {"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet", "controller": True}]}}
    mirror = {"metadata": {"name": "m", "annotations": {drain.MIRROR_ANNOTATION: "x"}}}
    rs = {"metadata": {"name": "w", "ownerReferences": [{"kind": "ReplicaSet", "controller": True}],
                       "labels": {NAMES.auto_replacement_label: "disabled"}}}
    assert drain.drainable([ds, mirror, rs]) == [rs]
    assert drain.opted_out([ds, rs], NAMES.auto_replacement_label)
    assert not drain.opted_out([ds], NAMES.auto_replacement_label)
