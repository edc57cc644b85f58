"""The Grafana dashboard: the shipped JSON is the builder's output, and every query names a real metric."""

import json
import re
import subprocess
from pathlib import Path

import yaml

from autoclusters.controller.controller_metrics import Metrics
from autoclusters.deploy.alerts import LEADERS_PER_SHARD, alerts
from autoclusters.ops.dashboard import dashboard, render
from tests.unit.ops.metric_names import metric_names

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "dashboards" / "autoclusters-grafana.json"


def exported_names() -> set[str]:
    return metric_names(Metrics().registry.collect())


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
                   "autoclusters_circuit_breaker_open", "autoclusters_workqueue_depth",
                   "autoclusters_informer_handler_errors_total"):
        assert metric in joined


def panel(title: str) -> dict:
    (found,) = [p for p in dashboard()["panels"] if p["title"] == title]
    return found


def test_the_leader_is_shown_per_shard_as_the_documented_alert_counts_it() -> None:
    """``max`` over all replicas hid a shard without a leader behind another shard's leader: the
    panel has one value per shard, and the shipped alert is the same expression."""
    (target,) = panel("Leader per shard")["targets"]
    assert target["expr"] == LEADERS_PER_SHARD and "by (shard, shards)" in LEADERS_PER_SHARD
    assert "{{shard}}" in target["legendFormat"]
    assert not any(re.search(r"max\(autoclusters_controller_leader\)", e) for e in exprs())
    (alert,) = [a for a in alerts() if a.name == "AutoclustersShardWithoutLeader"]
    assert alert.expr == f"{LEADERS_PER_SHARD} == 0"


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


def test_the_operations_guide_documents_every_metric_the_controller_exports() -> None:
    """docs/operations.md's metric table, against the registry: one source, the docs kept equal."""
    text = (ROOT / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(autoclusters_[a-z_]+)` \|", text, flags=re.M))
    families = set()
    for family in Metrics().registry.collect():
        families.add(f"{family.name}_total" if family.type == "counter" else family.name)
    assert families <= documented, f"undocumented: {sorted(families - documented)}"


# Grafana's variables as a query reaches Prometheus: the interval ones are durations, $pool the
# "All" value's regex.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "24h", "$pool": ".*"}


def test_every_query_is_promql_that_prometheus_parses(tmp_path: Path) -> None:
    """Each panel's query, its Grafana variables filled in, as a recording rule: ``promtool
    check rules`` parses every expression with Prometheus's own parser."""
    from autoclusters.devcluster.tools import ToolsMissing, promtool
    from tests.conftest import tool_missing

    try:
        binary = promtool()
    except ToolsMissing as e:
        tool_missing(str(e))
    queries = exprs()
    rules = []
    for i, expr in enumerate(queries):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"a Grafana variable this test does not fill in: {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    spec = tmp_path / "dashboard-queries.yaml"
    spec.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([str(binary), "check", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(queries)} rules found" in out.stdout
