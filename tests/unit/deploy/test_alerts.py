"""The alert rules: the shipped file is the builder's output, every expression names a metric a
process exports, and Prometheus's own rule engine (``promtool test rules``) fires each alert on
the series it is about, after its ``for``, with its labels and rendered text, and not on
healthy series."""

import itertools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from autoclusters.controller.controller_metrics import Metrics
from autoclusters.deploy.admission import webhook_names
from autoclusters.deploy.alerts import alerts, render, rules, spoken_duration
from autoclusters.detector.detector_metrics import render as detector_text
from autoclusters.names import Names
from autoclusters.slurm.bridge import BridgeStats
from autoclusters.slurm.bridge_metrics import registry as bridge_registry
from autoclusters.webhook.webhook_metrics import WebhookMetrics
from tests.conftest import tool_missing
from tests.unit.ops.metric_names import metric_names

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "monitoring" / "autoclusters.rules.yaml"
ALERTS = alerts()
# Metrics of upstream components the alerts read: the API server's own view of the webhooks
# (tests/integration/test_monitoring.py scrapes it from a real kube-apiserver).
UPSTREAM = {"apiserver_admission_webhook_rejection_count"}


def exported_names() -> set[str]:
    """What the controller, the detector, the Slurm bridge and the webhook export."""
    names = metric_names(Metrics().registry.collect())
    names |= metric_names(WebhookMetrics().registry.collect())
    bridge = SimpleNamespace(stats=BridgeStats(), informers=(SimpleNamespace(name="pools", handler_errors=0, lists={}),
                                                             SimpleNamespace(name="nodes", handler_errors=0, lists={})))
    names |= metric_names(bridge_registry(cast(Any, bridge)).collect())
    text = detector_text([], cast(Any, SimpleNamespace(writes=0, failures=0)), 0.0, poll_errors=0)
    names |= set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    return names


def test_shipped_file_is_the_builders_output() -> None:
    assert SHIPPED.read_text() == render(), "run: python -m autoclusters.deploy.alerts > " + str(SHIPPED)
    assert yaml.safe_load(SHIPPED.read_text()) == rules()


def test_every_expression_names_a_metric_a_process_exports() -> None:
    exported = exported_names() | UPSTREAM
    for alert in ALERTS:
        unquoted = re.sub(r'"[^"]*"', '""', alert.expr)  # label values are not metrics
        used = set(re.findall(r"\b(?:autoclusters|apiserver)_[a-z_]+\b", unquoted))
        assert used, alert.name
        assert used <= exported, f"{alert.name}: unknown metrics {sorted(used - exported)}"


def test_the_counters_the_alerts_take_an_increase_of_are_exported_at_0_from_the_start() -> None:
    """A labelled counter's child made by its first increment appears at 1, and increase() or
    rate() over a series whose first sample is 1 is 0: the first failed repair of a process (or
    the webhook's first error) would fire nothing. So every label value exists at 0 from the
    start, which the cases below assume (their series start at 0)."""
    from autoclusters.api import RepairAction
    from autoclusters.controller.statemachine import Outcome

    controller = Metrics().registry
    for action in RepairAction:
        assert controller.get_sample_value("autoclusters_repairs_outcome_total",
                                           {"action": action.value, "outcome": Outcome.FAILED.value}) == 0
    webhook = WebhookMetrics().registry
    for outcome in ("error", "undefined"):
        assert webhook.get_sample_value("autoclusters_webhook_reviews_total", {"outcome": outcome}) == 0


def test_the_webhook_alert_selects_the_webhooks_of_the_installations_names() -> None:
    """Another domain's installation (a second brand) alerts on its own webhooks' names."""
    (default,) = [a for a in ALERTS if a.name == "AutoclustersAdmissionWebhookUnreachable"]
    brand = Names("crusoe.ai", "Crusoe")
    (other,) = [a for a in alerts(brand) if a.name == default.name]
    assert "remediation\\\\.autoclusters\\\\.io" in default.expr and "autoclusters" not in other.expr
    assert "maintenance-labels\\\\.remediation\\\\.crusoe\\\\.ai" in other.expr  # the regex's dots, escaped


def test_alert_names_are_unique_and_each_has_a_case_below() -> None:
    names = [a.name for a in ALERTS]
    assert len(set(names)) == len(names)
    assert {c.alert for c in CASES} == set(names)


def test_the_operations_page_lists_every_alert_with_its_severity_and_for() -> None:
    body = (ROOT / "docs" / "operations.md").read_text().split("<!-- alerts:", 1)[1].splitlines()[1:]
    table = list(itertools.takewhile(lambda line: line.startswith("|"), body))[2:]  # after header, separator
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    shown = [(r[0].strip("`"), r[1], r[2]) for r in rows]
    assert shown == [(a.name, a.severity, a.for_) for a in ALERTS]


@dataclass(frozen=True)
class Case:
    """``series`` (Prometheus's expanding notation, one sample a minute) make ``alert`` fire at
    ``fires_at`` with ``labels`` (the rule's own ``severity`` added), and not yet at
    ``quiet_at`` (before its ``for``, or before the series show a fault); under ``healthy`` it
    does not fire at ``fires_at``."""

    alert: str
    series: dict[str, str]
    fires_at: str
    labels: list[dict[str, str]]
    quiet_at: str
    healthy: dict[str, str] = field(default_factory=dict)


def _leader(instance: str, shard: str, leads: int) -> dict[str, str]:
    target = f'job="autoclusters-controller",instance="{instance}"'
    return {f"autoclusters_controller_leader{{{target}}}": f"{leads}x40",
            f'autoclusters_controller_shard{{{target},shard="{shard}",shards="2"}}': "1x40"}


WEBHOOK = 'job="autoclusters-webhook",instance="10.0.0.9:8443"'
REJECTED = ('apiserver_admission_webhook_rejection_count{{name="{name}",type="validating",operation="UPDATE",'
            'error_type="{error}",rejection_code="0"}}')
NODE_HOOK = webhook_names(Names())[0]
DETECTOR = 'job="autoclusters-detector",instance="10.0.0.7:9103"'
DETECTOR_LABELS = {"job": "autoclusters-detector", "instance": "10.0.0.7:9103"}

CASES = [
    Case("AutoclustersControllerDown", {'up{job="other"}': "1x40"}, "11m", [{}], "9m",
         healthy=_leader("10.0.0.1:9102", "0", 1)),
    Case("AutoclustersShardWithoutLeader",
         {**_leader("10.0.0.1:9102", "0", 0), **_leader("10.0.0.2:9102", "0", 0), **_leader("10.0.0.3:9102", "1", 1)},
         "6m", [{"shard": "0", "shards": "2"}], "4m",
         healthy={**_leader("10.0.0.1:9102", "0", 1), **_leader("10.0.0.2:9102", "0", 0),
                  **_leader("10.0.0.3:9102", "1", 1)}),
    Case("AutoclustersCircuitBreakerOpen",
         {'autoclusters_circuit_breaker_open{pool="a100",instance="10.0.0.1:9102"}': "1x40",
          'autoclusters_circuit_breaker_open{pool="h100",instance="10.0.0.1:9102"}': "0x40"},
         "16m", [{"pool": "a100"}], "14m",
         healthy={'autoclusters_circuit_breaker_open{pool="a100",instance="10.0.0.1:9102"}': "0x40"}),
    Case("AutoclustersRepairFailed",
         {'autoclusters_repairs_outcome_total{action="reset",outcome="Failed",instance="10.0.0.1:9102"}':
          "0 0 0 1x40"},
         "4m", [{"action": "reset"}], "2m",
         healthy={'autoclusters_repairs_outcome_total{action="reset",outcome="Succeeded",instance="10.0.0.1:9102"}':
                  "0+1x40"}),
    Case("AutoclustersRepairAwaitingApproval",
         {'autoclusters_repairs_open_oldest_seconds{pool="a100",phase="AwaitingApproval",instance="c:9102"}':
          "20000+60x40",
          'autoclusters_repairs_open_oldest_seconds{pool="h100",phase="AwaitingApproval",instance="c:9102"}':
          "100+60x40"},
         "28m", [{"pool": "a100"}], "26m",  # 20,000 s + 27 minutes passes the 6 hours (21,600 s)
         # a repair in progress for that long is another phase's business
         healthy={'autoclusters_repairs_open_oldest_seconds{pool="a100",phase="Acting",instance="c:9102"}':
                  "30000+60x40"}),
    Case("AutoclustersRepairWaitingForPerson",
         {'autoclusters_repairs_open{pool="h100",phase="HumanNeeded",instance="c:9102"}': "1x80",
          'autoclusters_repairs_open{pool="h100",phase="AwaitingApproval",instance="c:9102"}': "3x80"},
         "61m", [{"pool": "h100", "phase": "HumanNeeded"}], "59m",
         healthy={'autoclusters_repairs_open{pool="h100",phase="Verifying",instance="c:9102"}': "2x80"}),
    Case("AutoclustersReconcileErrors",
         {'autoclusters_reconcile_errors_total{job="autoclusters-controller",instance="10.0.0.1:9102"}': "0+1x40"},
         "20m", [{"job": "autoclusters-controller", "instance": "10.0.0.1:9102"}], "10m",
         healthy={'autoclusters_reconcile_errors_total{job="autoclusters-controller",instance="10.0.0.1:9102"}':
                  "0 3 3x40"}),
    Case("AutoclustersInformerHandlerErrors",
         {'autoclusters_informer_handler_errors_total{job="slurm-bridge",instance="h:9104",informer="nodes"}':
          "0 0 0 1x40"},
         "4m", [{"job": "slurm-bridge", "instance": "h:9104", "informer": "nodes"}], "2m",
         healthy={'autoclusters_informer_handler_errors_total{job="slurm-bridge",instance="h:9104",informer="nodes"}':
                  "0x40"}),
    Case("AutoclustersDetectorCannotWriteConditions",
         {f"autoclusters_detector_condition_write_failures_total{{{DETECTOR}}}": "0+1x40"},
         "20m", [DETECTOR_LABELS], "10m",
         healthy={f"autoclusters_detector_condition_write_failures_total{{{DETECTOR}}}": "2 2 2x40",
                  f"autoclusters_detector_condition_writes_total{{{DETECTOR}}}": "0+1x40"}),
    Case("AutoclustersDetectorSourceUnreadable",
         {f'autoclusters_detector_unreadable_sources{{{DETECTOR},source="nvml"}}': "1x40"},
         "31m", [{**DETECTOR_LABELS, "source": "nvml"}], "29m",
         # a detector that reads every source exports no sample of the gauge
         healthy={f"autoclusters_detector_nodes{{{DETECTOR}}}": "1x40"}),
    Case("AutoclustersDetectorExpectedSourceUnavailable",
         {f'autoclusters_detector_expected_source_unavailable{{{DETECTOR},source="nvml"}}': "1x40",
          f'autoclusters_detector_expected_source_unavailable{{{DETECTOR},source="dcgm"}}': "0x40"},
         "16m", [{**DETECTOR_LABELS, "source": "nvml"}], "14m",
         # a source that is off by configuration, or absent where nothing implies it, is no blind spot
         healthy={f'autoclusters_detector_expected_source_unavailable{{{DETECTOR},source="nvml"}}': "0x40",
                  f'autoclusters_detector_source_state{{{DETECTOR},source="dcgm",state="off"}}': "1x40",
                  f'autoclusters_detector_source_state{{{DETECTOR},source="infiniband",state="unavailable"}}':
                  "1x40"}),
    Case("AutoclustersSlurmBridgeFailing",
         {'autoclusters_slurm_bridge_errors_total{scope="poll",job="slurm-bridge",instance="h:9104"}': "0+1x40"},
         "20m", [{"scope": "poll", "job": "slurm-bridge", "instance": "h:9104"}], "10m",
         # one node's sync failing is that node's event, not the bridge's outage
         healthy={'autoclusters_slurm_bridge_errors_total{scope="node",job="slurm-bridge",instance="h:9104"}':
                  "0+1x40",
                  'autoclusters_slurm_bridge_errors_total{scope="poll",job="slurm-bridge",instance="h:9104"}':
                  "1 1 1x40"}),
    Case("AutoclustersWebhookCannotDecide",
         {f'autoclusters_webhook_reviews_total{{{WEBHOOK},outcome="error"}}': "0+1x40",
          f'autoclusters_webhook_reviews_total{{{WEBHOOK},outcome="allowed"}}': "0+5x40"},
         "15m", [{"job": "autoclusters-webhook", "instance": "10.0.0.9:8443", "outcome": "error"}], "8m",
         # denials are the policy at work, not a failure
         healthy={f'autoclusters_webhook_reviews_total{{{WEBHOOK},outcome="denied"}}': "0+1x40",
                  f'autoclusters_webhook_reviews_total{{{WEBHOOK},outcome="allowed"}}': "0+5x40"}),
    Case("AutoclustersWebhookCertificateExpiring",
         # promtool's clock starts at 0: a notAfter of 600,000 s is under 7 days (604,800 s) away
         {f"autoclusters_webhook_certificate_expiry_timestamp_seconds{{{WEBHOOK}}}": "600000x40",
          'autoclusters_webhook_certificate_expiry_timestamp_seconds{job="autoclusters-webhook",instance="b:8443"}':
          "2600000x40"},
         "11m", [{"job": "autoclusters-webhook", "instance": "10.0.0.9:8443"}], "9m",
         # a renewed certificate, and a webhook that has loaded none yet (the gauge's 0)
         healthy={f"autoclusters_webhook_certificate_expiry_timestamp_seconds{{{WEBHOOK}}}": "600000 1200000x40",
                  'autoclusters_webhook_certificate_expiry_timestamp_seconds{job="autoclusters-webhook",'
                  'instance="b:8443"}': "0x40"}),
    Case("AutoclustersAdmissionWebhookUnreachable",
         {REJECTED.format(name=NODE_HOOK, error="calling_webhook_error"): "0+1x40",
          REJECTED.format(name="other-webhook.example.com", error="calling_webhook_error"): "0+1x40"},
         "8m", [{"name": NODE_HOOK}], "4m",
         # the webhook answering "no" is its policy, and another product's webhook is not ours
         healthy={REJECTED.format(name=NODE_HOOK, error="no_error"): "0+1x40",
                  REJECTED.format(name="other-webhook.example.com", error="calling_webhook_error"): "0+1x40"}),
]


def expand(template: str, labels: dict[str, str]) -> str:
    """The annotation as Prometheus renders it; a label the alert does not carry fails the test."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def _series(series: dict[str, str]) -> list[dict[str, str]]:
    return [{"series": s, "values": v} for s, v in series.items()]


def promtool_tests() -> dict[str, Any]:
    by_name = {a.name: a for a in ALERTS}
    tests: list[dict[str, Any]] = []
    for case in CASES:
        alert = by_name[case.alert]
        expected = [{"exp_labels": {**labels, "severity": alert.severity},
                     "exp_annotations": {"summary": expand(alert.summary, labels),
                                         "description": expand(alert.description, labels)}}
                    for labels in case.labels]
        tests.append({"name": f"{case.alert} fires", "interval": "1m", "input_series": _series(case.series),
                      "alert_rule_test": [{"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []},
                                          {"eval_time": case.fires_at, "alertname": case.alert,
                                           "exp_alerts": expected}]})
        tests.append({"name": f"{case.alert} stays quiet", "interval": "1m", "input_series": _series(case.healthy),
                      "alert_rule_test": [{"eval_time": case.fires_at, "alertname": case.alert, "exp_alerts": []}]})
    return {"rule_files": [str(SHIPPED)], "evaluation_interval": "1m", "tests": tests}


@pytest.fixture(scope="module")
def promtool() -> Path:
    from autoclusters.devcluster.tools import ToolsMissing
    from autoclusters.devcluster.tools import promtool as locate

    try:
        return locate()
    except ToolsMissing as e:
        tool_missing(str(e))


def test_promtool_accepts_the_rule_file(promtool: Path) -> None:
    out = subprocess.run([str(promtool), "check", "rules", str(SHIPPED)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(ALERTS)} rules found" in out.stdout


def test_each_alert_fires_on_its_fault_and_not_on_healthy_series(promtool: Path, tmp_path: Path) -> None:
    spec = tmp_path / "alerts_test.yaml"
    spec.write_text(yaml.safe_dump(promtool_tests(), sort_keys=False))
    out = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_tells_a_wrong_expectation_apart(promtool: Path, tmp_path: Path) -> None:
    """The harness can fail: the circuit breaker's case expected one ``for`` earlier does not pass."""
    tests = promtool_tests()
    (group,) = [t for t in tests["tests"] if t["name"] == "AutoclustersCircuitBreakerOpen fires"]
    group["alert_rule_test"][1]["eval_time"] = "14m"
    spec = tmp_path / "alerts_test.yaml"
    spec.write_text(yaml.safe_dump({**tests, "tests": [group]}, sort_keys=False))
    out = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 1 and "AutoclustersCircuitBreakerOpen" in out.stdout + out.stderr


def test_an_installations_rule_sees_its_own_controller_down_while_another_is_up(promtool: Path, tmp_path: Path) -> None:
    """The PrometheusRule of the installation in namespace ``gpu`` (its PodMonitors put
    ``namespace`` on every series): another installation's controller does not hide it."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules(Names(), namespace="gpu")))
    (alert,) = [a for a in alerts(namespace="gpu") if a.name == "AutoclustersControllerDown"]
    other = 'autoclusters_controller_leader{namespace="other",instance="10.0.0.5:9102"}'
    ours = 'autoclusters_controller_leader{namespace="gpu",instance="10.0.0.6:9102"}'
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": [{"series": other, "values": "1x20"}],
         "alert_rule_test": [{"eval_time": "11m", "alertname": alert.name, "exp_alerts": [
             {"exp_labels": {"namespace": "gpu", "severity": "critical"},
              "exp_annotations": {"summary": alert.summary, "description": alert.description}}]}]},
        {"interval": "1m", "input_series": [{"series": other, "values": "1x20"}, {"series": ours, "values": "1x20"}],
         "alert_rule_test": [{"eval_time": "11m", "alertname": alert.name, "exp_alerts": []}]}]}))
    out = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_installations_approval_wait_moves_the_approval_alert(promtool: Path, tmp_path: Path) -> None:
    """``monitoring.approvalWaitAlertSeconds`` at 30 minutes: the repair that has waited 31 fires,
    with the text saying 30 minutes; at 29 it has not."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules(Names(), approval_wait_seconds=1800)))
    (alert,) = [a for a in alerts(approval_wait_seconds=1800) if a.name == "AutoclustersRepairAwaitingApproval"]
    assert "30 minutes" in alert.summary and "30 minutes" in alert.description
    waiting = 'autoclusters_repairs_open_oldest_seconds{pool="a100",phase="AwaitingApproval",instance="c:9102"}'
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": [{"series": waiting, "values": "0+60x40"}],
         "alert_rule_test": [
             {"eval_time": "29m", "alertname": alert.name, "exp_alerts": []},
             {"eval_time": "31m", "alertname": alert.name, "exp_alerts": [
                 {"exp_labels": {"pool": "a100", "severity": "warning"},
                  "exp_annotations": {"summary": alert.summary.replace("{{ $labels.pool }}", "a100"),
                                      "description": alert.description.replace("{{ $labels.pool }}", "a100")}}]}]}]}))
    out = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("seconds, words", [(21600, "6 hours"), (3600, "1 hour"), (5400, "90 minutes"),
                                            (86400, "1 day"), (45, "45 seconds")])
def test_the_approval_wait_is_said_in_its_largest_whole_unit(seconds: int, words: str) -> None:
    assert spoken_duration(seconds) == words


@pytest.mark.parametrize("seconds", [0, -60, 1.5, True])
def test_the_approval_wait_must_be_a_positive_whole_number(seconds: Any) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        alerts(approval_wait_seconds=seconds)


def test_the_docs_give_the_approval_waits_default() -> None:
    from autoclusters.deploy.alerts import APPROVAL_WAIT_ALERT_SECONDS

    deploy = (ROOT / "docs" / "deploy.md").read_text()
    (row,) = [line for line in deploy.splitlines() if line.startswith("| `monitoring` |")]
    assert f"approvalWaitAlertSeconds: {APPROVAL_WAIT_ALERT_SECONDS}" in row
    assert f"({spoken_duration(APPROVAL_WAIT_ALERT_SECONDS)};" in row
    operations = (ROOT / "docs" / "operations.md").read_text()
    (row,) = [line for line in operations.splitlines() if line.startswith("| `AutoclustersRepairAwaitingApproval` |")]
    assert f"more than {spoken_duration(APPROVAL_WAIT_ALERT_SECONDS)} for its approval" in row
