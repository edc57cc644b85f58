"""Prometheus alerting rules over the metrics the system's processes export, as plain dicts.

``monitoring/autoclusters.rules.yaml`` is ``render()`` (``python -m autoclusters.deploy.alerts >
monitoring/autoclusters.rules.yaml``), a rule file for a Prometheus configured by hand; the stack's
``PrometheusRule`` (``monitoring.py``, for the Prometheus Operator) holds the same groups,
and the Grafana dashboard (``ops/dashboard.py``) shows the leaders per shard with the same
expression. Unit tests keep the file equal to this module, check that every expression names a
metric some process exports, and run Prometheus's own ``promtool`` over the file: ``check
rules``, and ``test rules`` with series under which each alert must fire and must not
(``tests/unit/deploy/test_alerts.py`` writes that test file); an integration test
(``tests/integration/test_alerts_live.py``) has a real Prometheus scrape a real controller.

Each alert keeps the labels of the series it fires on (``job``, ``instance``, and what the
scrape adds: the PodMonitors add ``pod`` and ``node``) unless it sums over them; the
description says what the alert means and where to look (docs/operations.md, "Metrics and
alerts").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from autoclusters.deploy.admission import webhook_names
from autoclusters.kube import informer_metrics
from autoclusters.names import Names

GROUP = "autoclusters"
# How long a repair of a propose pool may wait for its approval before someone is told, by
# default: the node is marked but still runs work on its faulty hardware meanwhile. The stack
# setting ``monitoring.approvalWaitAlertSeconds`` and ``autoclusters alerts
# --approval-wait-seconds`` set another (a team that approves in office hours, a 24/7 one).
APPROVAL_WAIT_ALERT_SECONDS = 6 * 3600
# Leaders per shard: each replica's leader gauge (1 on the one holding its shard's lease)
# joined by its scrape target (``job``, ``instance``: every Prometheus puts both on every
# series it scrapes) to its shard gauge. ``max`` over all replicas would hide a shard without a
# leader behind another shard's; the alert is this expression ``== 0``, the dashboard's panel
# this expression.
LEADERS_PER_SHARD = ("sum by (shard, shards) (autoclusters_controller_leader * on(job, instance) "
                     "group_left(shard, shards) autoclusters_controller_shard)")
CRITICAL, WARNING = "critical", "warning"
# The webhook's serving certificate is renewed with a third of its life left (10 days of the
# controller's 30; cert-manager renews at a third by default too), so one with less than this
# left means renewal has failed for days, and there is still a week to mend it before every
# approval and pool change is refused (failurePolicy: Fail).
WEBHOOK_CERT_ALERT_SECONDS = 7 * 86400


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str  # how long the expression must hold ("0m": at once)
    severity: str
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0m":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def alerts(names: Names | None = None, namespace: str | None = None,
           approval_wait_seconds: int = APPROVAL_WAIT_ALERT_SECONDS) -> tuple[Alert, ...]:
    """Every alert; ``names`` give the admission webhooks' names (the default names otherwise).
    With ``namespace`` (the PrometheusRule of an installation, whose PodMonitors label every
    series with it) the controller counts as down when that installation's is, even while
    another installation's controller is scraped. A repair waits ``approval_wait_seconds`` for
    its approval before its alert fires."""
    # A regex in a PromQL string: the dots of the DNS names escaped for the regex, and that
    # backslash escaped for the string.
    webhooks = "|".join(w.replace(".", "\\\\.") for w in webhook_names(names or Names()))
    return (_controller_down(namespace), *_ALERTS[:_APPROVAL_AT], _awaiting_approval(approval_wait_seconds),
            *_ALERTS[_APPROVAL_AT:], *_webhook_alerts(webhooks))


def spoken_duration(seconds: int) -> str:
    """``seconds`` in the largest whole unit, as an alert's text says it: ``6 hours``, ``90 minutes``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    raise AssertionError("unreachable: every integer is a whole number of seconds")


def valid_approval_wait(seconds: object) -> bool:
    """A wait the approval alert takes: a positive whole number of seconds."""
    return isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0


def _awaiting_approval(seconds: int) -> Alert:
    if not valid_approval_wait(seconds):
        raise ValueError(f"the approval wait before an alert must be a positive number of seconds, got {seconds!r}")
    wait = spoken_duration(seconds)
    return Alert("AutoclustersRepairAwaitingApproval",
                 "max by (pool) (autoclusters_repairs_open_oldest_seconds{phase=\"AwaitingApproval\"}) > "
                 f"{seconds}", "0m", WARNING,
                 "A repair of pool {{ $labels.pool }} has waited over " + wait + " for its approval",
                 "Pool {{ $labels.pool }} is in propose mode and a faulty node has waited more than " + wait
                 + " for the approval label; it keeps running work on its faulty hardware meanwhile. Approve it "
                 "(`autoclusters approve`) or set the pool's consent mode.")


def _controller_down(namespace: str | None) -> Alert:
    selector = f'{{namespace="{namespace}"}}' if namespace else ""
    return Alert("AutoclustersControllerDown", f"absent(autoclusters_controller_leader{selector})", "10m", CRITICAL,
                 "No autoclusters controller is scraped",
                 "No replica of the remediation controller has been scraped for 10 minutes. The detectors "
                 "still report faults on the nodes, but nothing repairs them: check the controller's "
                 "Deployment and its pods' logs.")


_ALERTS: tuple[Alert, ...] = (
    Alert("AutoclustersShardWithoutLeader", f"{LEADERS_PER_SHARD} == 0", "5m", CRITICAL,
          "Controller shard {{ $labels.shard }} of {{ $labels.shards }} has no leader",
          "The replicas of controller shard {{ $labels.shard }} are scraped but none of them has "
          "held the shard's Lease for 5 minutes, so the pools of that shard are not repaired. "
          "Check the replicas' logs for leader election errors."),
    Alert("AutoclustersCircuitBreakerOpen", "max by (pool) (autoclusters_circuit_breaker_open) > 0", "15m", CRITICAL,
          "Automatic repairs of pool {{ $labels.pool }} are stopped by its circuit breaker",
          "Too large a share of pool {{ $labels.pool }}'s nodes is faulty, so its circuit breaker "
          "has held every new repair for 15 minutes. That many faults at once usually share a "
          "cause (a driver or firmware rollout, power, the fabric): find it before repairing "
          "(`autoclusters status`, `kubectl get gnp {{ $labels.pool }}`)."),
    Alert("AutoclustersRepairFailed",
          'sum by (action) (increase(autoclusters_repairs_outcome_total{outcome="Failed"}[1h])) > 0', "0m", WARNING,
          "A node {{ $labels.action }} failed in the last hour",
          "At least one {{ $labels.action }} ended Failed in the last hour; its node keeps its "
          "maintenance label and taint. `kubectl get events -A --field-selector "
          "reason=MaintenanceActionFailed` names the nodes and why."),
    Alert("AutoclustersRepairWaitingForPerson",
          'max by (pool, phase) (autoclusters_repairs_open{phase=~"Failed|HumanNeeded"}) > 0', "1h", WARNING,
          "Nodes of pool {{ $labels.pool }} are held in {{ $labels.phase }}",
          "For an hour at least one repair of pool {{ $labels.pool }} has been held in {{ $labels.phase }} "
          "(a replacement that failed, or an attempt budget spent): its node stays marked and cordoned "
          "until a person acts. `kubectl get rem` names the records."),
    Alert("AutoclustersReconcileErrors", "rate(autoclusters_reconcile_errors_total[5m]) > 0", "15m", WARNING,
          "The controller's reconciles keep failing on {{ $labels.instance }}",
          "Reconciles have failed and backed off in every 5 minute window for 15 minutes on "
          "{{ $labels.instance }}: repairs there may be stalled. The controller's log names the "
          "keys and the errors."),
    Alert("AutoclustersInformerHandlerErrors", f"increase({informer_metrics.NAME}_total[1h]) > 0", "0m", WARNING,
          "{{ $labels.job }} failed to take in a change of a watched object",
          "The {{ $labels.informer }} watch of {{ $labels.instance }} raised on a change in the last "
          "hour; the object is taken again at its next change. This is a bug to report: the "
          "process's log names the object, with a traceback."),
    Alert("AutoclustersDetectorCannotWriteConditions",
          "rate(autoclusters_detector_condition_write_failures_total[5m]) > 0", "15m", CRITICAL,
          "The detector on {{ $labels.instance }} cannot write its node's conditions",
          "The detector's condition patches have failed in every 5 minute window for 15 minutes, "
          "so a fault on its node would not be reported or repaired. Check the detector pod's log "
          "(RBAC, the admission webhook, the API server)."),
    Alert("AutoclustersDetectorSourceUnreadable", "autoclusters_detector_unreadable_sources > 0", "30m", WARNING,
          "The detector on {{ $labels.instance }} cannot read {{ $labels.source }}",
          "For 30 minutes the detector has not been able to read its {{ $labels.source }} source, so "
          "faults that only that source shows go undetected on its node. The node's detector "
          "health condition says why."),
    Alert("AutoclustersDetectorExpectedSourceUnavailable", "autoclusters_detector_expected_source_unavailable > 0",
          "15m", WARNING,
          "The detector on {{ $labels.instance }} lacks {{ $labels.source }}, which its node's hardware implies",
          "For 15 minutes the {{ $labels.source }} source has been unavailable on a node whose hardware implies it "
          "(NVML on a node whose driver lists GPUs, dcgmi where a DCGM hostengine is configured), so the faults "
          "only it shows go undetected there. The node's GPUHealthDetectorDegraded condition "
          "(ExpectedFaultSourceUnavailable) and `autoclusters status` say why: usually the image or its mounts."),
    Alert("AutoclustersSlurmBridgeFailing",
          'rate(autoclusters_slurm_bridge_errors_total{scope="poll"}[5m]) > 0', "15m", WARNING,
          "The Slurm bridge's polls keep failing",
          "Every poll of the Slurm bridge on {{ $labels.instance }} has failed for 15 minutes (the "
          "API server or `sinfo`): jobs on nodes about to be repaired are not drained or requeued "
          "first. The bridge's log has the error."),
    Alert("AutoclustersWebhookCannotDecide",
          'rate(autoclusters_webhook_reviews_total{outcome=~"error|undefined"}[5m]) > 0', "10m", CRITICAL,
          "The admission webhook on {{ $labels.instance }} cannot evaluate its policy",
          "For 10 minutes the webhook's reviews have ended in {{ $labels.outcome }}: its OPA sidecar "
          "is failing or has no policy loaded. Such a review is refused, so people and "
          "automation cannot write the maintenance labels (approvals included); the controller's "
          "own writes are exempt. Check the OPA sidecar's log and the policy ConfigMap."),
    # "> 0": a webhook that has loaded no certificate yet exports the gauge at 0.
    Alert("AutoclustersWebhookCertificateExpiring",
          "(autoclusters_webhook_certificate_expiry_timestamp_seconds > 0) - time() < "
          f"{WEBHOOK_CERT_ALERT_SECONDS}", "10m", CRITICAL,
          "The admission webhook on {{ $labels.instance }} serves a certificate that expires within "
          + spoken_duration(WEBHOOK_CERT_ALERT_SECONDS),
          "The serving certificate of the webhook on {{ $labels.instance }} has less than "
          + spoken_duration(WEBHOOK_CERT_ALERT_SECONDS) + " left, so its renewal has failed for days. When it "
          "expires the API server refuses every approval and pool change (failurePolicy: Fail). Check the "
          "controller's log (it renews the Secret autoclusters-webhook-tls) or cert-manager's Certificate, "
          "and that the webhook's pods see the Secret (docs/admission.md, Certificates)."),
)

# The approval alert (its threshold is a setting) comes after the failed repairs'.
_APPROVAL_AT = 1 + next(i for i, a in enumerate(_ALERTS) if a.name == "AutoclustersRepairFailed")


def _webhook_alerts(webhooks: str) -> tuple[Alert, ...]:
    """The API server's own view of the webhooks (``apiserver_admission_webhook_rejection_count``,
    which every Prometheus that scrapes the API server has): it could not call them."""
    return (Alert(
        "AutoclustersAdmissionWebhookUnreachable",
        f'sum by (name) (rate(apiserver_admission_webhook_rejection_count{{name=~"{webhooks}",'
        'error_type=~"calling_webhook_error|apiserver_internal_error"}[5m])) > 0', "5m", CRITICAL,
        "The API server cannot call the admission webhook {{ $labels.name }}",
        "For 5 minutes the API server has failed to call {{ $labels.name }} (no ready pod behind its "
        "Service, a certificate its caBundle does not match, a timeout). The webhook fails closed: "
        "every write of the maintenance labels or pools but the controller's is refused, "
        "approvals included. Check the webhook's pods, Service and certificate."),)


def rules(names: Names | None = None, namespace: str | None = None,
          approval_wait_seconds: int = APPROVAL_WAIT_ALERT_SECONDS) -> dict[str, Any]:
    """The rule file: one group of every alert."""
    return {"groups": [{"name": GROUP, "rules": [a.rule() for a in alerts(names, namespace, approval_wait_seconds)]}]}


def render() -> str:
    header = ("# Generated by `python -m autoclusters.deploy.alerts` (autoclusters/deploy/alerts.py); do not edit.\n"
              "# A Prometheus rule file: list it under `rule_files` in prometheus.yml.\n")
    import yaml  # here, not at the top: the CLI's parser imports this module for its defaults

    return header + yaml.safe_dump(rules(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
