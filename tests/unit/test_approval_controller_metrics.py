"""The approval example's metrics: a node its watch's handler raises on is logged with the
node's name, counted, and served under the name the controller's counter has."""

from __future__ import annotations

import logging
import urllib.request
from types import ModuleType
from typing import Any

import pytest

from autoclusters.clock import FakeClock
from autoclusters.controller.controller_metrics import Metrics
from autoclusters.names import Names
from tests.unit import builders
from tests.unit.example_module import load_example
from tests.unit.fakeapi import FakeApi


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example("approval-controller/approval_controller.py", "approval_controller")


def node(name: str) -> dict[str, Any]:
    return builders.node(name, pool="", detected=False, labels={Names().maintenance_required: "true"})


def test_a_handler_error_is_logged_with_the_node_counted_and_served(example: ModuleType, caplog) -> None:
    clock = FakeClock()
    ctl = example.ApprovalController(FakeApi(clock=clock.now).kube(), example.Config(names=Names(), prepare=""), clock)
    handler = ctl.nodes._handler

    def buggy(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if name == "poison":  # a bug in a copy of the example meets this node
            raise KeyError("spec")
        handler(name, old, new)

    ctl.nodes._handler = buggy
    with caplog.at_level(logging.INFO):
        for name in ("poison", "gpu-1"):
            ctl.nodes._apply({"type": "ADDED", "object": node(name)})
    assert any("poison" in r.getMessage() and r.exc_info for r in caplog.records)
    assert any("gpu-1" in r.getMessage() and "not handled here" in r.getMessage() for r in caplog.records)
    registry = example.metrics_registry(ctl)
    assert registry.get_sample_value("autoclusters_informer_handler_errors_total",
                                     {"informer": "nodes-needing-repair"}) == 1
    from prometheus_client import start_http_server

    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert 'autoclusters_informer_handler_errors_total{informer="nodes-needing-repair"} 1.0' in body


def test_the_shared_counter_has_the_controllers_name_and_help(example: ModuleType) -> None:
    """One name and meaning: the example's collector and the controller's counter describe the same metric."""
    clock = FakeClock()
    ctl = example.ApprovalController(FakeApi(clock=clock.now).kube(), example.Config(names=Names(), prepare=""), clock)
    ours = {m.name: m.documentation for m in example.metrics_registry(ctl).collect()}
    controllers = {m.name: m.documentation for m in Metrics().registry.collect()}
    assert ours.items() <= controllers.items() and "autoclusters_informer_handler_errors" in ours
