"""The shipped alerts in a real Prometheus (``tools/build-tools.sh monitoring``) scraping a real
controller: a replacement that fails on the local cluster fires ``AutoclustersRepairFailed``
and puts ``AutoclustersRepairWaitingForPerson`` in pending, with the labels an operator routes
on, while nothing fired before the failure.

What promtool's unit tests cannot see is checked here: the series the controller really
exports (the failed-repair counter at 0 before any failure, without which ``increase()`` never
sees the first one) and the path scrape → rule → alert."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.sim.provider import ANN_FAIL_REPLACE
from tests.integration.controller_support import Env, controller_env
from tests.integration.helpers import wait_for
from tests.integration.image_support import free_port

pytestmark = pytest.mark.integration
RULES = Path(__file__).resolve().parents[2] / "monitoring" / "autoclusters.rules.yaml"


@pytest.fixture(scope="module")
def scraped(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, int]]:
    """A controller of its own (its own domain and lease) that serves metrics on a free port."""
    port = free_port()
    with controller_env(cluster, tmp_path_factory.mktemp("alerts-controller"), owner="alerts",
                        metrics_port=str(port)) as env:
        yield env, port


@pytest.fixture()
def prometheus(scraped: tuple[Env, int], tmp_path: Path) -> Iterator[str]:
    """Prometheus scraping that controller every second and evaluating the shipped rules every
    second; its API's base URL."""
    from autoclusters.devcluster.tools import ToolsMissing
    from autoclusters.devcluster.tools import prometheus as binary
    from tests.conftest import tool_missing

    try:
        server = binary()
    except ToolsMissing as e:
        tool_missing(str(e))
    _, metrics_port = scraped
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "autoclusters-controller",
                            "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen([str(server), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for("Prometheus to be ready", lambda: _ok(f"{base}/-/ready"), timeout=60)
        yield base
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
        log.close()


def _ok(url: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)
    return False


def _get(base: str, path: str, **query: str) -> Any:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]


def _alerts(base: str, name: str) -> list[dict[str, Any]]:
    return [a for a in _get(base, "/api/v1/alerts")["alerts"] if a["labels"].get("alertname") == name]


def _value(base: str, query: str) -> float | None:
    result = _get(base, "/api/v1/query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


def test_a_failed_replacement_fires_the_shipped_alerts_in_a_real_prometheus(
        scraped: tuple[Env, int], prometheus: str) -> None:
    env, _ = scraped
    pool, (node,) = env.pool(faultClasses={"gpu": "replace"})
    env.kube.patch_node(node, {"metadata": {"annotations": {ANN_FAIL_REPLACE: "true"}}})
    failed = 'autoclusters_repairs_outcome_total{action="replace",outcome="Failed"}'
    # Before any failure the counter is there, at 0, scraped several times: the start that
    # increase() needs.
    wait_for("three scrapes of the failed-replacement counter at 0",
             lambda: (_value(prometheus, f"count_over_time({failed}[1m])") or 0) >= 3
             and _value(prometheus, f"max_over_time({failed}[1m])") == 0, timeout=60)
    assert _alerts(prometheus, "AutoclustersRepairFailed") == []

    env.raise_fault(node)
    record = env.record_in(node, "Failed", timeout=90)
    assert record["status"]["action"] == "replace"

    firing = wait_for("AutoclustersRepairFailed firing",
                      lambda: [a for a in _alerts(prometheus, "AutoclustersRepairFailed") if a["state"] == "firing"],
                      timeout=30)
    assert [a["labels"] for a in firing] == [
        {"alertname": "AutoclustersRepairFailed", "action": "replace", "severity": "warning"}]
    assert firing[0]["annotations"]["summary"] == "A node replace failed in the last hour"
    held = wait_for("AutoclustersRepairWaitingForPerson pending",
                    lambda: _alerts(prometheus, "AutoclustersRepairWaitingForPerson"), timeout=30)
    assert [(a["state"], a["labels"]["pool"], a["labels"]["phase"]) for a in held] == [("pending", pool, "Failed")]
    # the controller is up and leads: its own alerts stay quiet
    assert _alerts(prometheus, "AutoclustersControllerDown") == []
    assert _alerts(prometheus, "AutoclustersReconcileErrors") == []
