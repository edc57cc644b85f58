"""The Grafana dashboard: the shipped JSON is the builder's output, and every query names a real metric."""

import json
import re
from pathlib import Path

from autoclusters.controller.metrics import Metrics
from autoclusters.ops.dashboard import dashboard, render

SHIPPED = Path(__file__).resolve().parents[3] / "dashboards" / "autoclusters-grafana.json"


def exported_names() -> set[str]:
    names: set[str] = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{s}" for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_shipped_json_is_the_builders_output() -> None:
    assert SHIPPED.read_text() == render(), "run: python -m autoclusters.ops.dashboard > " + str(SHIPPED)


def test_every_query_names_a_metric_the_controller_exports() -> None:
    exported = exported_names()
    used = {m for e in exprs() for m in re.findall(r"\bautoclusters_[a-z_]+\b", e)}
    assert used, "no queries found"
    assert used <= exported, f"unknown metrics: {sorted(used - exported)}"


def test_the_issue_asks_for_these_views() -> None:
    joined = " ".join(exprs())
    for metric in ("autoclusters_faults_total", "autoclusters_repairs_phase_total",
                   "autoclusters_repairs_outcome_total", "autoclusters_repair_phase_seconds_bucket",
                   "autoclusters_circuit_breaker_open", "autoclusters_workqueue_depth"):
        assert metric in joined


def test_panels_do_not_overlap_and_ids_are_unique() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"panel {p['title']!r} overlaps another"
        cells |= mine


def test_every_panel_uses_the_datasource_variable() -> None:
    data = json.loads(render())
    for p in data["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}"
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
