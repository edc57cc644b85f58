"""API Priority and Fairness answers 429 with Retry-After: the client waits what the server
asks and sends the request again, a few times, counting each refusal; a PodDisruptionBudget's
429 (a Status object from the eviction API) is the caller's answer, not throttling; the work
queue and the informer never come back sooner than the server asked.

The 429s are kube-apiserver's bytes on a socket (a scripted HTTP server below the lean
transport, not a fake of the client), so the header parsing and the body's Status check run too."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from autoclusters.controller.controller_metrics import Metrics
from autoclusters.kube import Kube, Throttled, TooManyRequests
from autoclusters.kube.errors import from_status, retry_after_seconds
from autoclusters.kube.light import load_light_kube
from autoclusters.kube.workqueue import WorkQueue
from tests.unit.kube.test_connection import ok, serving

# What kube-apiserver's flow-control filter writes (apiserver/pkg/server/filters/priority-and-fairness.go)
THROTTLED = (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 2\r\n"
             b"Content-Length: 43\r\n\r\nToo many requests, please try again later.\n")
PDB_STATUS = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests",
                         "code": 429, "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                         "details": {"causes": [{"reason": "DisruptionBudget"}], "retryAfterSeconds": 10}}).encode()
PDB_REFUSAL = (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 10\r\n"
               + f"Content-Length: {len(PDB_STATUS)}\r\n\r\n".encode() + PDB_STATUS)


def _kube(tmp_path: Path, port: int, waits: list[float]) -> Kube:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump({
        "current-context": "c", "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    kube = load_light_kube(str(path))
    kube.sleep = waits.append
    return kube


def test_a_throttled_request_is_sent_again_after_retry_after_and_counted(tmp_path: Path) -> None:
    answers = iter([[THROTTLED], [THROTTLED], ok(b'{"metadata": {"name": "n1"}}')])
    with serving(lambda req: next(answers)) as srv:
        waits: list[float] = []
        kube = _kube(tmp_path, srv.port, waits)
        assert kube.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})["metadata"]["name"] == "n1"
        assert waits == [2.0, 2.0]
        assert sum(len(c) for c in srv.connections) == 3
    assert kube.requests.snapshot() == {("controller", "patch", "nodes"): 3}
    assert kube.requests.snapshot_throttled() == {("controller", "patch", "nodes"): 2}


def test_throttling_that_outlasts_the_retries_reaches_the_caller_with_the_delay(tmp_path: Path) -> None:
    with serving(lambda req: [THROTTLED]) as srv:
        waits: list[float] = []
        kube = _kube(tmp_path, srv.port, waits)
        with pytest.raises(Throttled) as e:
            kube.for_component("leader-election").get("/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
    assert e.value.retry_after == 2.0 and e.value.status == 429
    assert isinstance(e.value, TooManyRequests)  # an eviction's caller still takes it as "later"
    assert waits == [2.0, 2.0]  # a third wait would pass the 5 s budget: the caller backs off instead
    assert kube.requests.snapshot_throttled() == {("leader-election", "get", "leases"): 3}


def test_a_view_without_retries_fails_at_once_and_a_long_retry_after_goes_to_the_caller(tmp_path: Path) -> None:
    long_wait = THROTTLED.replace(b"Retry-After: 2", b"Retry-After: 9")
    answers = iter([[THROTTLED], [long_wait]])
    with serving(lambda req: next(answers)) as srv:
        waits: list[float] = []
        kube = _kube(tmp_path, srv.port, waits)
        with pytest.raises(Throttled):
            kube.for_component("leader-election", throttle_retries=0).get("/apis/coordination.k8s.io/v1/leases")
        with pytest.raises(Throttled) as e:
            kube.get("/api/v1/nodes/n1")
    assert waits == [] and e.value.retry_after == 9.0
    assert kube.throttle_retries == 3  # the view's setting is its own


def test_a_disruption_budgets_429_is_the_eviction_apis_answer_not_throttling(tmp_path: Path) -> None:
    with serving(lambda req: [PDB_REFUSAL]) as srv:
        waits: list[float] = []
        kube = _kube(tmp_path, srv.port, waits)
        with pytest.raises(TooManyRequests) as e:
            kube.evict("ns", "p")
        assert len(srv.connections[0]) == 1  # sent once: the actuator decides when to try again
    assert not isinstance(e.value, Throttled) and e.value.retry_after == 10.0
    assert waits == [] and kube.requests.snapshot_throttled() == {}


def test_the_full_clients_errors_translate_the_same_way() -> None:
    from kubernetes.client.exceptions import ApiException

    from autoclusters.kube.errors import translate

    exc = ApiException(status=429, reason="Too Many Requests")
    exc.body = "Too many requests, please try again later.\n"
    exc.headers = {"Retry-After": "3"}
    got = translate(exc)
    assert isinstance(got, Throttled) and got.retry_after == 3.0
    assert type(from_status(429, "", PDB_STATUS, "10")) is TooManyRequests


@pytest.mark.parametrize("value, seconds", [("1", 1.0), (" 7 ", 7.0), ("", None), (None, None),
                                            ("Wed, 21 Oct 2026 07:28:00 GMT", None), ("-1", None)])
def test_retry_after_is_read_in_seconds(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value) == seconds


def test_the_work_queue_backs_off_no_sooner_than_the_server_asked() -> None:
    now = [0.0]
    q = WorkQueue(base_delay=0.05, monotonic=lambda: now[0])
    assert q.backoff("n1", at_least=5.0) == 5.0
    now[0] = 4.9
    assert q.get(timeout=0) is None
    now[0] = 5.0
    assert q.get(timeout=0) == "n1"
    q.done("n1")
    assert q.backoff("n2") == 0.05  # without a Retry-After: the usual doubling from the base


def test_the_controller_exports_the_throttled_requests() -> None:
    metrics = Metrics()
    metrics.count_requests(lambda: {("controller", "patch", "nodes"): 5},
                           lambda: {("controller", "patch", "nodes"): 2})
    reg = metrics.registry
    labels = {"component": "controller", "verb": "patch", "resource": "nodes"}
    assert reg.get_sample_value("autoclusters_controller_api_requests_total", labels) == 5
    assert reg.get_sample_value("autoclusters_controller_api_throttled_total", labels) == 2


def test_the_controllers_lease_requests_never_wait_out_a_retry_after() -> None:
    """A renewal held past the renew deadline would leave the replica acting on a lease running
    out: the elector's requests fail at once; the reconciles' wait as the client does."""
    from autoclusters.clock import FakeClock
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.manager import Controller
    from autoclusters.names import Names
    from tests.unit.fakeapi import FakeApi

    controller = Controller(FakeApi().kube(), ControllerConfig(metrics_port=0), names=Names(),
                            clock=FakeClock(datetime(2026, 12, 1, tzinfo=UTC)))
    assert controller.elector._kube.throttle_retries == 0
    assert controller.kube.throttle_retries == 3
