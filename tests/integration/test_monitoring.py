"""The stack's objects for the Prometheus Operator against the operator's own CRDs (from the
prometheus-operator module, ``tools/build-tools.sh monitoring``): the API server takes the
PodMonitors and the PrometheusRule as the stack builds them, with strict field validation (a
misspelled field is an error, not a silently dropped one), and stores every field we wrote.
The operator itself does not run here; the rules' PromQL is checked by ``promtool`` in the unit
tests."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from autoclusters.deploy.monitoring import API_VERSION, Monitoring, monitoring_objects
from autoclusters.deploy.pool_config import stack_config_from_dict
from autoclusters.deploy.stack import stack_objects
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Invalid, Kube, NotFound

pytestmark = pytest.mark.integration
GROUP, VERSION = API_VERSION.split("/")
PLURALS = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


@pytest.fixture(scope="module")
def operator_crds(cluster: ClusterHandle) -> ClusterHandle:
    """The operator's CRDs on the cluster: applied from the built module when it is there (the
    local cluster always); on another cluster they may already be installed."""
    from autoclusters.devcluster.tools import ToolsMissing, prometheus_operator_crds
    from tests.conftest import tool_missing

    try:
        crds = prometheus_operator_crds()
    except ToolsMissing as e:
        try:
            cluster.kube.get(f"/apis/{GROUP}/{VERSION}")
        except NotFound:
            tool_missing(f"the Prometheus Operator's CRDs are neither installed on the cluster nor built here: {e}")
        return cluster
    cluster.apply([doc for path in sorted(crds.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
                   if doc and doc.get("kind") == "CustomResourceDefinition"])
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
        ("PrometheusRule", "autoclusters")]
    for obj in objs:
        _create_strict(kube, obj)
        stored = kube.get(_path(obj, obj["metadata"]["name"]))
        # nothing pruned or defaulted away: every field we wrote is stored as we wrote it
        assert stored["spec"] == obj["spec"], obj["kind"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
        assert stored["metadata"]["labels"]["release"] == "kps"
    rules = kube.get(_path(objs[2], "autoclusters"))["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {"AutoclustersControllerDown", "AutoclustersCircuitBreakerOpen"}


def test_the_crds_are_strict_enough_to_catch_a_wrong_object(operator_crds: ClusterHandle, namespace: str) -> None:
    """The check above can fail: a misspelled field and a ``for`` that is not a duration are
    refused."""
    kube = operator_crds.kube
    monitor, _, rule = monitoring_objects(Monitoring(prometheus_operator=True), namespace)
    misspelled = {**monitor, "spec": {**monitor["spec"], "podMetricEndpoints": monitor["spec"]["podMetricsEndpoints"]}}
    with pytest.raises(Invalid, match="podMetricEndpoints"):
        _create_strict(kube, misspelled)
    group = rule["spec"]["groups"][0]
    bad_for = {**rule, "spec": {"groups": [{**group, "rules": [{**group["rules"][0], "for": "10 minutes"}]}]}}
    with pytest.raises(Invalid):
        _create_strict(kube, bad_for)
