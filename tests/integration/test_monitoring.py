"""The stack's objects for the Prometheus Operator against the operator's own CRDs (from the
prometheus-operator module, ``tools/build-tools.sh monitoring``): the API server takes the
PodMonitors and the PrometheusRule as the stack builds them, with strict field validation (a
misspelled field is an error, not a silently dropped one), and stores every field we wrote.
The operator itself does not run here; the rules' PromQL is checked by ``promtool`` in the unit
tests."""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters.certificates import make_ca
from autoclusters.deploy.admission import webhook_configuration, webhook_names
from autoclusters.deploy.alerts import alerts, rules
from autoclusters.deploy.monitoring import API_VERSION, Monitoring, monitoring_objects
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Invalid, Kube, KubeError, NotFound
from autoclusters.names import Names
from tests.integration.helpers import upstream_crds, wait_for
from tests.integration.image_support import free_port

pytestmark = pytest.mark.integration
GROUP, VERSION = API_VERSION.split("/")
PLURALS = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


@pytest.fixture(scope="module")
def operator_crds(cluster: ClusterHandle) -> ClusterHandle:
    """The operator's CRDs on the cluster (``helpers.upstream_crds``)."""
    from autoclusters.devcluster.tools import prometheus_operator_crds

    upstream_crds(cluster, prometheus_operator_crds, f"/apis/{GROUP}/{VERSION}", "the Prometheus Operator's")
    return cluster


@pytest.fixture()
def namespace(operator_crds: ClusterHandle) -> Iterator[str]:
    ns = f"mon-{secrets.token_hex(3)}"
    kube = operator_crds.kube
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield ns
    with contextlib.suppress(NotFound):
        kube.delete(f"/api/v1/namespaces/{ns}")


def _path(obj: dict[str, Any], name: str | None = None) -> str:
    return Kube.custom_path(GROUP, VERSION, PLURALS[obj["kind"]], name, namespace=obj["metadata"]["namespace"])


def _create_strict(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    return kube.create(_path(obj), obj, fieldValidation="Strict")


def test_the_stacks_monitoring_objects_are_taken_whole_by_the_operators_crds(
        operator_crds: ClusterHandle, namespace: str) -> None:
    kube = operator_crds.kube
    config = stack_config_from_dict({"namespace": namespace,
                                     "monitoring": {"prometheusOperator": True, "labels": {"release": "kps"}}})
    objs = [o for o in stack_objects(config) if o["apiVersion"] == API_VERSION]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == [
        ("PodMonitor", "autoclusters-controller"), ("PodMonitor", "autoclusters-detector"),
        ("PodMonitor", "autoclusters-webhook"), ("PrometheusRule", "autoclusters")]
    for obj in objs:
        _create_strict(kube, obj)
        stored = kube.get(_path(obj, obj["metadata"]["name"]))
        # nothing pruned or defaulted away: every field we wrote is stored as we wrote it
        assert stored["spec"] == obj["spec"], obj["kind"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
        assert stored["metadata"]["labels"]["release"] == "kps"
    rules = kube.get(_path(objs[-1], "autoclusters"))["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {"AutoclustersControllerDown", "AutoclustersCircuitBreakerOpen"}


def test_the_crds_are_strict_enough_to_catch_a_wrong_object(operator_crds: ClusterHandle, namespace: str) -> None:
    """The check above can fail: a misspelled field and a ``for`` that is not a duration are
    refused."""
    kube = operator_crds.kube
    monitor, *_, rule = monitoring_objects(Monitoring(prometheus_operator=True), namespace, operator_crds.names)
    misspelled = {**monitor, "spec": {**monitor["spec"], "podMetricEndpoints": monitor["spec"]["podMetricsEndpoints"]}}
    with pytest.raises(Invalid, match="podMetricEndpoints"):
        _create_strict(kube, misspelled)
    group = rule["spec"]["groups"][0]
    bad_for = {**rule, "spec": {"groups": [{**group, "rules": [{**group["rules"][0], "for": "10 minutes"}]}]}}
    with pytest.raises(Invalid):
        _create_strict(kube, bad_for)


def _apiserver_samples(kube: Kube, metric: str) -> list[dict[str, str]]:
    """The label sets of ``metric`` in the API server's own /metrics (read as text lines:
    ``prometheus_client``'s parser renames a counter whose name does not end in ``_total``)."""
    text = b"".join(kube.request("GET", "/metrics", stream=True).stream()).decode()  # text, not JSON
    return [dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
            for m in re.finditer(rf"^{metric}\{{(.*)\}} \S+$", text, re.M)]


def test_the_webhook_alert_fires_on_the_api_servers_own_series_for_an_unreachable_webhook(
        cluster: ClusterHandle, tmp_path: Path) -> None:
    """A webhook configuration built as the stack builds it, for a domain of its own, pointed at a
    port where nothing listens: the API server refuses an approval it cannot have checked and
    counts it in ``apiserver_admission_webhook_rejection_count``. That series, with the label set
    the real API server writes, fires the shipped alert under promtool; the same series of
    another webhook does not."""
    from autoclusters.devcluster.tools import ToolsMissing, promtool
    from tests.conftest import tool_missing

    try:
        binary = promtool()
    except ToolsMissing as e:
        tool_missing(str(e))
    kube, token = cluster.kube, secrets.token_hex(3)
    names = Names(domain=f"mon{token}.autoclusters.io", prefix="Mon")
    hook = webhook_names(names)[0]
    ca_pem = make_ca(f"mon-{token}", datetime.now(UTC), timedelta(days=1)).cert_pem
    config = webhook_configuration(names, ca_bundle=ca_pem, url=f"https://127.0.0.1:{free_port()}/validate",
                                   include_pools=False, name=f"mon-{token}")
    kube.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", config)
    (node,) = cluster.create_gpu_nodes(f"mon{token}", 1, prefix=f"mon{token}")
    try:
        tries = iter(range(1000))

        def refused() -> bool:
            # a new value each try: a write that does not change the label is not the webhook's
            try:
                kube.patch_node(node, {"metadata": {"labels": {names.maintenance_approved: f"try{next(tries)}"}}})
            except KubeError as e:
                assert "failed calling webhook" in str(e), e
                return True
            return False  # the configuration is not in force yet

        wait_for("the API server to call the unreachable webhook", refused, timeout=30)
        rejected = [s for s in _apiserver_samples(kube, "apiserver_admission_webhook_rejection_count")
                    if s.get("name") == hook]
        assert rejected and all(s["error_type"] == "calling_webhook_error" for s in rejected), rejected
    finally:
        with contextlib.suppress(NotFound):
            kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/mon-{token}")
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/nodes/{node}")

    def series(labels: dict[str, str]) -> str:
        return "apiserver_admission_webhook_rejection_count{" + ",".join(
            f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    ours, theirs = rejected[0], {**rejected[0], "name": "other-webhook.example.com"}
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules(names)))
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series(ours), "values": "0+1x20"}, {"series": series(theirs), "values": "0+1x20"}],
        "alert_rule_test": [{"eval_time": "8m", "alertname": "AutoclustersAdmissionWebhookUnreachable",
                             "exp_alerts": [{"exp_labels": {"name": hook, "severity": "critical"},
                                             "exp_annotations": _annotations(names, hook)}]}]}]}))
    out = subprocess.run([str(binary), "test", "rules", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _annotations(names: Names, hook: str) -> dict[str, str]:
    (alert,) = [a for a in alerts(names) if a.name == "AutoclustersAdmissionWebhookUnreachable"]
    return {"summary": alert.summary.replace("{{ $labels.name }}", hook),
            "description": alert.description.replace("{{ $labels.name }}", hook)}
