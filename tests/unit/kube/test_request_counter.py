"""Requests counted by verb and resource, as the API server names them; exported as a metric."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from autoclusters.controller.controller_metrics import Metrics
from autoclusters.kube.request_counter import RequestCounter, request_kind


@pytest.mark.parametrize(("method", "path", "query", "kind"), [
    ("GET", "/api/v1/nodes/n1", None, ("get", "nodes")),
    ("GET", "/api/v1/nodes", {"labelSelector": "a=b"}, ("list", "nodes")),
    ("GET", "/api/v1/nodes", {"watch": True, "resourceVersion": "5"}, ("watch", "nodes")),
    ("GET", "/api/v1/nodes", {"watch": "true"}, ("watch", "nodes")),
    ("PATCH", "/api/v1/nodes/n1/status", None, ("patch", "nodes/status")),
    ("PATCH", "/api/v1/nodes/n1", None, ("patch", "nodes")),
    ("POST", "/api/v1/namespaces/ns/pods/p1/eviction", None, ("create", "pods/eviction")),
    ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, ("list", "pods")),
    ("POST", "/api/v1/namespaces/ns/events", None, ("create", "events")),
    ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", None, ("create", "events")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", None, ("update", "leases")),
    ("PATCH", "/apis/x.io/v1alpha1/namespaces/ns/remediations/r1/status", None, ("patch", "remediations/status")),
    ("POST", "/apis/x.io/v1alpha1/namespaces/ns/remediations", None, ("create", "remediations")),
    ("GET", "/apis/x.io/v1alpha1/gpunodepools/p", None, ("get", "gpunodepools")),
    ("PATCH", "/apis/x.io/v1alpha1/gpunodepools/p/status", None, ("patch", "gpunodepools/status")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", None, ("delete", "pods")),
    ("DELETE", "/api/v1/namespaces/ns/pods", None, ("deletecollection", "pods")),
    ("GET", "/api/v1/namespaces", None, ("list", "namespaces")),
    ("GET", "/api/v1/namespaces/ns", None, ("get", "namespaces")),
    ("POST", "/api/v1/namespaces", None, ("create", "namespaces")),
    ("GET", "/apis/x.io/v1alpha1", None, ("get", "discovery")),
    ("GET", "/version", None, ("get", "/version")),
])
def test_request_kind(method: str, path: str, query: dict | None, kind: tuple[str, str]) -> None:
    assert request_kind(method, path, query) == kind


def test_counts_and_metric() -> None:
    counter = RequestCounter()
    counter.add("PATCH", "/api/v1/nodes/a/status")
    counter.add("PATCH", "/api/v1/nodes/b/status")
    counter.add("GET", "/api/v1/nodes", {"watch": True})
    counter.add("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", component="leader-election")
    assert counter.total == 4
    assert counter.snapshot() == {("controller", "patch", "nodes/status"): 2, ("controller", "watch", "nodes"): 1,
                                  ("leader-election", "update", "leases"): 1}
    metrics = Metrics()
    metrics.count_requests(counter.snapshot)
    counter.add("POST", "/api/v1/namespaces/ns/pods/p/eviction")
    text = generate_latest(metrics.registry).decode()
    assert ('autoclusters_controller_api_requests_total{component="controller",resource="nodes/status",'
            'verb="patch"} 2.0') in text
    assert ('autoclusters_controller_api_requests_total{component="controller",resource="pods/eviction",'
            'verb="create"} 1.0') in text
    assert ('autoclusters_controller_api_requests_total{component="leader-election",resource="leases",'
            'verb="update"} 1.0') in text


def test_a_component_view_shares_the_client_and_its_counter() -> None:
    from tests.unit.fakeapi import FakeApi

    api = FakeApi()
    kube = api.kube()
    provider = kube.for_component("provider/simulated")
    api.put("/api/v1/nodes", {"metadata": {"name": "n1"}})
    kube.get_node("n1")
    provider.get_node("n1")
    provider.get_node("n1")
    assert kube.component == "controller" and provider.requests is kube.requests
    assert kube.requests.snapshot() == {("controller", "get", "nodes"): 1, ("provider/simulated", "get", "nodes"): 2}


def test_repeated_paths_count_under_their_kind_and_a_watch_of_a_listed_path_apart() -> None:
    counter = RequestCounter()
    for _ in range(3):
        counter.add("GET", "/api/v1/nodes", {"watch": True}, component="controller")
        counter.add("GET", "/api/v1/nodes", {"limit": 500}, component="controller")
        counter.add("PATCH", "/api/v1/nodes/n1/status", component="provider/simulated")
    counter.add("GET", "/api/v1/nodes", None, component="controller")
    assert counter.snapshot() == {("controller", "watch", "nodes"): 3, ("controller", "list", "nodes"): 4,
                                  ("provider/simulated", "patch", "nodes/status"): 3}
