"""The stack's objects for the Prometheus Operator: a PodMonitor per component that serves
metrics (the controller, the detectors, the webhook), and a PrometheusRule with the alerts
(``deploy/alerts.py``).

On by the stack setting ``monitoring: {prometheusOperator: true}`` (the cluster needs the
operator's CRDs); ``labels`` go on all four objects, for an operator whose ``podMonitorSelector``
and ``ruleSelector`` select by label (kube-prometheus-stack's select ``release: <its release>``).
The PrometheusRule's controller-down alert asks for its own namespace's controller, and its
approval alert fires after ``approvalWaitAlertSeconds`` (6 hours by default). Without the
operator, Prometheus finds the same pods by their ``prometheus.io/*`` annotations
(``workloads.scrape_annotations``) and loads ``monitoring/autoclusters.rules.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters.deploy import alerts, workloads
from autoclusters.names import Names

API_VERSION = "monitoring.coreos.com/v1"
RULE_NAME = "autoclusters"
# The components whose pods serve metrics over HTTP on their ``metrics`` port, by the label
# that selects them; the webhook serves its metrics on its HTTPS port (``webhook_pod_monitor``).
SCRAPED = (workloads.CONTROLLER, workloads.DETECTOR)
# Each series scraped from a pod carries the node the pod runs on: a detector's alert names its node.
NODE_LABEL = "node"


class MonitoringConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Monitoring:
    """The ``monitoring`` stack setting."""

    prometheus_operator: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    approval_wait_alert_seconds: int = alerts.APPROVAL_WAIT_ALERT_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.prometheus_operator, bool):
            raise MonitoringConfigError(
                f"monitoring.prometheusOperator must be true or false, got {self.prometheus_operator!r}")
        if not isinstance(self.labels, Mapping) or not all(
                isinstance(k, str) and k and isinstance(v, str) for k, v in self.labels.items()):
            raise MonitoringConfigError(f"monitoring.labels must map label names to strings, got {self.labels!r}")
        if not alerts.valid_approval_wait(self.approval_wait_alert_seconds):
            raise MonitoringConfigError("monitoring.approvalWaitAlertSeconds must be a positive number of seconds, "
                                        f"got {self.approval_wait_alert_seconds!r}")


_NODE_RELABELING = {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                    "targetLabel": NODE_LABEL}


def pod_monitor(component: str, namespace: str, extra_labels: Mapping[str, str],
                endpoint: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Scrapes ``component``'s pods in ``namespace``: their ``metrics`` port unless ``endpoint``
    says otherwise."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": {"name": component, "namespace": namespace,
                     "labels": {**workloads.labels(component), **extra_labels}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": component}},
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [{
                **(endpoint or {"port": workloads.METRICS_PORT_NAME}), "path": "/metrics",
                "relabelings": [dict(_NODE_RELABELING)],
            }],
        },
    }


def webhook_pod_monitor(namespace: str, extra_labels: Mapping[str, str]) -> dict[str, Any]:
    """The webhook's metrics, on its HTTPS port: verified against the CA in its TLS Secret
    (``ca.crt``, which the stack and cert-manager write), by the name its certificate is for."""
    return pod_monitor(workloads.WEBHOOK, namespace, extra_labels, {
        "port": workloads.WEBHOOK_PORT_NAME, "scheme": "https",
        "tlsConfig": {"ca": {"secret": {"name": workloads.WEBHOOK_TLS_SECRET, "key": "ca.crt"}},
                      "serverName": workloads.webhook_service_dns(namespace)}})


def prometheus_rule(namespace: str, extra_labels: Mapping[str, str], names: Names,
                    approval_wait_seconds: int = alerts.APPROVAL_WAIT_ALERT_SECONDS) -> dict[str, Any]:
    """The alerts of ``monitoring/autoclusters.rules.yaml`` (for ``names``) as a PrometheusRule."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": RULE_NAME, "app.kubernetes.io/part-of": workloads.PART_OF,
                                **extra_labels}},
        "spec": alerts.rules(names, namespace, approval_wait_seconds),
    }


def monitoring_objects(config: Monitoring, namespace: str, names: Names) -> list[dict[str, Any]]:
    """The PodMonitors and the PrometheusRule, or nothing without ``prometheusOperator``."""
    if not config.prometheus_operator:
        return []
    return [*(pod_monitor(c, namespace, config.labels) for c in SCRAPED),
            webhook_pod_monitor(namespace, config.labels),
            prometheus_rule(namespace, config.labels, names, config.approval_wait_alert_seconds)]
