"""The Grafana dashboard over the controller's Prometheus metrics, built as a plain dict.

``dashboards/autoclusters-grafana.json`` is this function's output (``python -m
autoclusters.ops.dashboard > dashboards/autoclusters-grafana.json``); a unit test fails when
the file is stale or when a panel queries a metric the controller does not export, so a
renamed metric cannot silently blank a panel.

Metrics (``autoclusters.controller.controller_metrics.Metrics``): ``autoclusters_faults_total{fault_class}``,
``autoclusters_repairs_phase_total{phase}``, ``autoclusters_repairs_outcome_total{action,outcome}``,
``autoclusters_repair_phase_seconds{phase}`` (histogram), ``autoclusters_circuit_breaker_open{pool}``,
``autoclusters_workqueue_depth``, ``autoclusters_reconcile_errors_total``, ``autoclusters_controller_leader``,
``autoclusters_controller_shard{shard,shards}``, ``autoclusters_informer_handler_errors_total{informer}``
(which the Slurm bridge, the simulated fleet and the approval example export too).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from autoclusters.api import Phase
from autoclusters.deploy.alerts import LEADERS_PER_SHARD

JSON = dict[str, Any]

DS = {"type": "prometheus", "uid": "${datasource}"}
UID = "autoclusters-overview"



def _target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> JSON:
    t: JSON = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref}
    if instant:
        t["instant"], t["range"] = True, False
    return t


class _Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping into rows."""

    def __init__(self) -> None:
        self.panels: list[JSON] = []
        self.x = self.y = self.row_h = 0

    def row(self, title: str) -> None:
        if self.x:
            self.y += self.row_h
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1
        self.x = self.row_h = 0

    def add(self, panel: JSON, w: int, h: int) -> None:
        if self.x + w > 24:
            self.y += self.row_h
            self.x = self.row_h = 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        panel.setdefault("datasource", DS)
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def _stat(title: str, expr: str, description: str, *, thresholds: list[tuple[float | None, str]],
          unit: str = "short", mappings: list[JSON] | None = None) -> JSON:
    return {
        "type": "stat", "title": title, "description": description,
        "targets": [_target(expr, instant=True)],
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "none", "textMode": "value", "justifyMode": "center"},
        "fieldConfig": {"defaults": {
            "unit": unit, "mappings": mappings or [],
            "thresholds": {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in thresholds]}},
            "overrides": []},
    }


def _timeseries(title: str, targets: list[JSON], description: str, *, unit: str = "short",
                stack: bool = False, bars: bool = False) -> JSON:
    custom: JSON = {"drawStyle": "bars" if bars else "line", "fillOpacity": 60 if bars else 10,
                    "lineWidth": 1, "showPoints": "never", "spanNulls": False,
                    "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    return {
        "type": "timeseries", "title": title, "description": description, "targets": targets,
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["sum", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
    }


def _bars(title: str, expr: str, legend: str, description: str) -> JSON:
    return {
        "type": "bargauge", "title": title, "description": description,
        "targets": [_target(expr, legend, instant=True)],
        "options": {"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "fieldConfig": {"defaults": {"unit": "short", "min": 0, "decimals": 0}, "overrides": []},
    }


def dashboard() -> JSON:
    lay = _Layout()
    lay.row("Now")
    lay.add(_stat("Open circuit breakers", "sum(autoclusters_circuit_breaker_open) or vector(0)",
                  "Pools whose automatic repairs are paused because too large a share of their nodes is faulty "
                  "(a fleet-wide cause such as a driver, firmware or fabric problem).",
                  thresholds=[(None, "green"), (1, "red")]), 4, 4)
    lay.add(_stat("Work queue depth", "sum(autoclusters_workqueue_depth) or vector(0)",
                  "Nodes and pools waiting for the controller to reconcile them. It should return to zero.",
                  thresholds=[(None, "green"), (50, "orange"), (500, "red")]), 4, 4)
    lay.add(_stat("Failed repairs (24h)",
                  'sum(increase(autoclusters_repairs_outcome_total{outcome="Failed"}[24h])) or vector(0)',
                  "Replacements that failed: each left its node marked for a human (MaintenanceActionFailed).",
                  thresholds=[(None, "green"), (1, "red")]), 4, 4)
    lay.add(_stat("Reconcile errors (1h)", "sum(increase(autoclusters_reconcile_errors_total[1h])) or vector(0)",
                  "Reconciles that failed and backed off (API errors, provider errors).",
                  thresholds=[(None, "green"), (1, "orange"), (20, "red")]), 4, 4)
    lay.add(_stat("Informer handler errors (1h)",
                  "sum(increase(autoclusters_informer_handler_errors_total[1h])) or vector(0)",
                  "Changes of one object a watch's handler raised on, in every process scraped (the controller, "
                  "and the Slurm bridge, the simulated fleet, the approval example where they serve metrics). "
                  "Any is a bug: the process's log names the object.",
                  thresholds=[(None, "green"), (1, "red")]), 4, 4)
    leader = _stat("Leader per shard", LEADERS_PER_SHARD,
                   "One value per shard: whether a replica of that shard holds its leader lease (one box "
                   "unsharded). A shard without a leader repairs nothing in its pools. 'split': two replicas "
                   "report the lease (a handover between two scrapes; a bug if it lasts). A shard none of whose "
                   "replicas is scraped shows no box: count the boxes against 'of N'.",
                   thresholds=[(None, "red"), (1, "green"), (2, "orange")],
                   mappings=[{"type": "value", "options": {"0": {"text": "none"}, "1": {"text": "held"}}},
                             {"type": "range", "options": {"from": 2, "to": None, "result": {"text": "split"}}}])
    leader["targets"][0]["legendFormat"] = "shard {{shard}} of {{shards}}"
    leader["options"]["textMode"] = "value_and_name"
    leader["fieldConfig"]["defaults"]["noValue"] = "no controller scraped"
    lay.add(leader, 4, 4)

    lay.row("Faults")
    lay.add(_timeseries("Faults by class", [_target(
        "sum by (fault_class) (increase(autoclusters_faults_total[$__rate_interval]))", "{{fault_class}}")],
        "Faults that opened a repair record, by class (gpu, nvswitch, dcgm, interconnect).", stack=True,
        bars=True), 16, 8)
    lay.add(_bars("Faults by class (dashboard range)",
                  "sum by (fault_class) (increase(autoclusters_faults_total[$__range]))", "{{fault_class}}",
                  "Total faults per class over the selected time range."), 8, 8)

    lay.row("Repairs")
    lay.add(_timeseries("Repairs entering each phase", [_target(
        "sum by (phase) (increase(autoclusters_repairs_phase_total[$__rate_interval]))", "{{phase}}")],
        f"{', '.join(Phase)}.", stack=False), 12, 8)
    lay.add(_timeseries("Repair outcomes by action", [_target(
        "sum by (action, outcome) (increase(autoclusters_repairs_outcome_total[$__rate_interval]))",
        "{{action}} {{outcome}}")],
        "Finished repairs: reset or replace, and how they ended.", stack=True, bars=True), 12, 8)
    lay.add(_bars("Outcomes (dashboard range)",
                  "sum by (action, outcome) (increase(autoclusters_repairs_outcome_total[$__range]))",
                  "{{action}} {{outcome}}", "Totals over the selected time range."), 8, 8)
    lay.add(_timeseries("Open repairs by phase", [_target(
        'sum by (phase) (max by (pool, phase) (autoclusters_repairs_open{pool=~"$pool"}))', "{{phase}}")],
        "Repairs not yet history, by phase, from the controller's record cache: waiting for approval, held "
        "by a guard (Scheduled), in progress, or held for a person (Failed, HumanNeeded).", stack=True), 16, 8)

    lay.row("Time in each phase")
    for q, title in ((0.5, "Median"), (0.95, "p95")):
        lay.add(_timeseries(f"{title} time in phase", [_target(
            f"histogram_quantile({q}, sum by (le, phase) (rate(autoclusters_repair_phase_seconds_bucket"
            f"[$__rate_interval])))", "{{phase}}")],
            "How long repairs stay in each phase. AwaitingApproval is the operator's share; Draining is "
            "bounded by the pool's drain deadlines; Acting and Verifying are the provider's.", unit="s"), 12, 8)
    lay.add(_bars("Mean time in phase (dashboard range)",
                  "sum by (phase) (increase(autoclusters_repair_phase_seconds_sum[$__range])) / "
                  "sum by (phase) (increase(autoclusters_repair_phase_seconds_count[$__range]))",
                  "{{phase}}", "Average seconds per phase over the selected range."), 24, 7)
    lay.panels[-1]["fieldConfig"]["defaults"].update({"unit": "s", "decimals": 1})

    lay.row("Circuit breaker, work queue and informers")
    breaker = _timeseries("Circuit breaker by pool (1 = open)", [_target(
        'max by (pool) (autoclusters_circuit_breaker_open{pool=~"$pool"})', "{{pool}}")],
        "1 while a pool's breaker is open (RepairCircuitBreakerOpen event); it closes by itself when the faulty "
        "share falls below closeBelowPercent.")
    breaker["type"] = "state-timeline"
    breaker["options"] = {"showValue": "never", "mergeValues": True, "rowHeight": 0.8,
                          "legend": {"displayMode": "list", "placement": "bottom"}}
    breaker["fieldConfig"] = {"defaults": {
        "mappings": [{"type": "value", "options": {"0": {"text": "closed", "color": "green"},
                                                   "1": {"text": "open", "color": "red"}}}],
        "thresholds": {"mode": "absolute", "steps": [{"value": None, "color": "green"}, {"value": 1, "color": "red"}]},
        "color": {"mode": "thresholds"}}, "overrides": []}
    lay.add(breaker, 12, 8)
    lay.add(_timeseries("Work queue depth and reconcile errors", [
        _target("sum(autoclusters_workqueue_depth)", "queue depth", "A"),
        _target("sum(increase(autoclusters_reconcile_errors_total[$__rate_interval]))", "reconcile errors", "B")],
        "Keys waiting for a reconcile, and reconciles that failed."), 12, 8)
    lay.add(_timeseries("Informer handler errors by process and informer", [_target(
        "sum by (job, informer) (increase(autoclusters_informer_handler_errors_total[$__rate_interval]))",
        "{{job}} {{informer}}")],
        "Changes of one object a watch's handler raised on; the object is handed over again at its next change. "
        "Any is a bug to report: the process's log names the object, with a traceback.", bars=True), 24, 8)

    return {
        "uid": UID, "title": "autoclusters: GPU node repairs", "tags": ["autoclusters", "gpu", "kubernetes"],
        "description": "Faults, repairs by phase and outcome, time in each phase, circuit breakers and the "
                       "controller's work queue.",
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"}, "timezone": "utc", "fiscalYearStartMonth": 0, "liveNow": False,
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "options": [], "includeAll": False, "multi": False},
            {"name": "pool", "label": "Pool", "type": "query", "datasource": DS,
             "query": {"query": "label_values(autoclusters_circuit_breaker_open, pool)", "refId": "pool"},
             "definition": "label_values(autoclusters_circuit_breaker_open, pool)",
             "current": {"text": "All", "value": "$__all"}, "includeAll": True, "allValue": ".*", "multi": True,
             "refresh": 2, "sort": 1, "hide": 0, "options": []},
        ]},
        "panels": lay.panels,
        "links": [],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
