"""When the platform fails (issue 28): OPA frozen mid-repair, and API Priority and Fairness
throttling the controller's identity. Each case runs a repair under ``auto`` and one under
``propose``, injects the fault at a named phase, and checks that every repair ends Succeeded
once with one provider action, no fault is lost, and the record and events agree."""

from __future__ import annotations

import secrets
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters.devcluster.processes import free_port
from autoclusters.kube import KubeError, Throttled, load_kube
from autoclusters.names import EVENT_SUCCEEDED
from tests.integration.controller_support import Env
from tests.integration.helpers import wait_for
from tests.integration.platform_opa_apf_support import (
    FreezableOpa,
    apiserver_metrics,
    controller_username,
    sample,
    scrape,
    throttled,
)
from tests.integration.test_admission import SCOPE_LABEL, Admission, kubectl
from tests.integration.test_controller_ha import assert_one_clean_reset, phase

pytestmark = pytest.mark.integration

HUNG = "the policy engine did not answer in time"


@pytest.fixture()
def hung_opa_admission(ctl: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Admission, FreezableOpa]]:
    """The webhook of the controller's own label domain, asking a real OPA of this test's own."""
    if not ctl.cluster.local:
        pytest.skip("the webhook and OPA run on this host: needs the local cluster")
    workdir = tmp_path_factory.mktemp("opa-hung")
    server = FreezableOpa(workdir / "opa.log")
    adm = Admission(ctl.cluster, workdir)
    adm.names = ctl.names
    adm.opa_url = server.url
    adm.webhook_env = ctl.process_env()
    adm.webhook_args = ["--namespace", ctl.namespace]
    adm.controllers = [controller_username(ctl)]
    try:
        adm.setup_identities()
        adm.webhook_start()
        yield adm, server
    finally:
        server.close()  # thawed first
        adm.cleanup()


def scoped_pool(ctl: Env, adm: Admission, mode: str) -> str:
    _, (node,) = ctl.pool(mode)
    ctl.kube.patch_node(node, {"metadata": {"labels": {SCOPE_LABEL: adm.suffix}}})
    return node


def test_opa_frozen_denies_users_in_time_and_never_slows_the_controller(
        ctl: Env, hung_opa_admission: tuple[Admission, FreezableOpa]) -> None:
    adm, server = hung_opa_admission
    approved = ctl.names.maintenance_approved
    baseline, hung_auto, proposed = (scoped_pool(ctl, adm, m) for m in ("auto", "auto", "propose"))
    # the webhook judges this domain's approvals: one on a healthy node is the policy's denial
    def enforced() -> bool:
        r = kubectl(adm.user, "label", "node", proposed, f"{approved}=true")
        return r.returncode != 0 and "maintenance-approved-requires-fault" in r.stderr
    wait_for("the webhook judging approvals", enforced, timeout=30, interval=0.3)
    # OPA answering: the baseline repair
    started = time.monotonic()
    ctl.raise_fault(baseline)
    ctl.record_in(baseline, "Succeeded", timeout=40)
    base = time.monotonic() - started
    # the propose repair parked in AwaitingApproval, then OPA frozen: the auto repair starts (Pending)
    ctl.raise_fault(proposed)
    wait_for("AwaitingApproval", lambda: phase(ctl, proposed) == "AwaitingApproval", timeout=30)
    metrics_url = f"https://127.0.0.1:{adm.port}/metrics"
    tls = ssl.create_default_context(cafile=str(adm.workdir / "certs" / "ca.crt"))
    before = scrape(metrics_url, tls)
    server.freeze()
    frozen_at = time.monotonic()
    ctl.raise_fault(hung_auto)
    # a person's approval meanwhile: refused by the webhook's own time-out (1 s), well before the
    # API server's (timeoutSeconds 3), and the message says why
    start = time.monotonic()
    r = kubectl(adm.user, "label", "node", proposed, f"{approved}=true")
    took = time.monotonic() - start
    print(f"\napproval while OPA is frozen: refused in {took:.2f}s: {r.stderr.strip()}")
    assert r.returncode != 0 and HUNG in r.stderr, r.stderr
    assert 1.0 <= took < 3.0
    # the controller's repair runs as if nothing were wrong: its label writes are exempt
    ctl.record_in(hung_auto, "Succeeded", timeout=40)
    hung = time.monotonic() - frozen_at  # the approval's kubectl above ran beside the repair
    after = scrape(metrics_url, tls)
    def grew(metric: str) -> float:
        return sample(after, metric) - sample(before, metric)

    assert grew("autoclusters_webhook_opa_timeouts_total") == 1
    # exactly the one review (the person's): the controller's writes never reached the webhook
    assert grew("autoclusters_webhook_reviews_total") == 1
    assert server.frozen and server.proc.poll() is None  # still frozen all along
    print(f"repair (fault to Succeeded) with OPA answering: {base:.1f}s; with OPA frozen: {hung:.1f}s")
    # had its two maintenance-label writes (mark, clear) gone to the webhook, each would have
    # waited out the 1 s time-out (and been refused)
    assert hung < base + 2.0, "the controller's repair waited on the policy engine"
    # OPA back: the same approval goes through, the propose repair finishes
    server.thaw()
    r = kubectl(adm.user, "label", "node", proposed, f"{approved}=true")
    assert r.returncode == 0, r.stderr
    ctl.record_in(proposed, "Succeeded", timeout=40)
    for node in (baseline, hung_auto, proposed):
        assert_one_clean_reset(ctl, node)
    ctl.wait_reason(proposed, EVENT_SUCCEEDED)
    assert ctl.reasons(proposed).count(EVENT_SUCCEEDED) == 1


@pytest.fixture()
def metered(ctl: Env) -> Iterator[tuple[Env, int]]:
    """The session's controller, restarted with a metrics port."""
    for c in ctl.running():
        c.terminate()
    port = free_port()
    c = ctl.start_controller(metrics_port=str(port))
    ctl.wait_leader([c], timeout=30)
    yield ctl, port
    ctl.ensure_one_controller()


class SeatHolders:
    """Other requests of the throttled identity (a co-tenant of its priority level) that each
    hold one of the level's seats for seconds, so only ``free`` seats (and the one queue slot)
    are left to the controller whatever the machine's speed: a read at a resourceVersion ahead
    of the API server's, which its watch cache waits for (3 s) before it answers 504."""

    def __init__(self, kubeconfig: str, threads: int) -> None:
        self.kube = load_kube(kubeconfig, qps_pool=threads)
        self.kube.throttle_retries = 0  # a co-tenant that does not wait: pressure
        self.ahead = str(int(self.kube.list_with_version("/api/v1/nodes")[1]) + 10**9)
        self.held: list[float] = []
        self.refused = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self.kube.get("/api/v1/nodes", limit=1, resourceVersion=self.ahead,
                              resourceVersionMatch="NotOlderThan")
            except Throttled:
                self.refused += 1
                self._stop.wait(0.5)
            except KubeError:
                self.held.append(time.monotonic() - start)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def test_priority_and_fairness_throttling_the_controller_loses_no_work(metered: tuple[Env, int]) -> None:
    ctl, port = metered
    _, (waiting,) = ctl.pool("propose")
    # three auto repairs at once: their requests come in bursts that one seat cannot take
    _, autos = ctl.pool("auto", nodes=3, maxConcurrentRepairs=3,
                        circuitBreaker={"openAbovePercent": 100, "closeBelowPercent": 100},
                        provider={"type": "simulated", "simulated": {"resetSeconds": 2}})
    ctl.raise_fault(waiting)
    wait_for("AwaitingApproval", lambda: phase(ctl, waiting) == "AwaitingApproval", timeout=30)
    name = f"ac-test-throttle-{secrets.token_hex(3)}"
    sa_kube = load_kube(ctl.sa_kubeconfig)
    level_before = sample(apiserver_metrics(ctl.kube), "apiserver_flowcontrol_rejected_requests_total",
                          priority_level=name)
    assert level_before == 0
    with throttled(ctl.cluster, ctl, sa_kube, name, shares=1):
        seats = int(sample(apiserver_metrics(ctl.kube), "apiserver_flowcontrol_nominal_limit_seats",
                           priority_level=name))
        load = SeatHolders(ctl.sa_kubeconfig, threads=max(0, seats - 1))  # one seat left to the controller
        try:
            started = time.monotonic()
            for node in autos:
                ctl.raise_fault(node)  # the auto repairs start under throttling (Pending)
            ctl.approve(waiting)  # the propose one resumes from AwaitingApproval under it
            for node in (*autos, waiting):
                ctl.record_in(node, "Succeeded", timeout=90)
            took = time.monotonic() - started
        finally:
            load.stop()
        ours = scrape(f"http://127.0.0.1:{port}/metrics")  # first: the server's count is never behind it
        server = apiserver_metrics(ctl.kube)
    rejected = sample(server, "apiserver_flowcontrol_rejected_requests_total", priority_level=name)
    by_controller = sample(ours, "autoclusters_controller_api_throttled_total")
    requests = sample(ours, "autoclusters_controller_api_requests_total")
    held = sum(load.held) / max(1, len(load.held))
    print(f"\nthrottled level: {seats} seats, {len(load._threads)} held by a co-tenant ({len(load.held)} reads of "
          f"{held:.1f}s, {load.refused} refused); the API server refused {rejected:g} requests of the identity, "
          f"the controller's: {by_controller:g} of {requests:g} requests; all four repairs Succeeded {took:.1f}s after "
          "the fault")
    assert rejected > 0 and by_controller > 0, "nothing was throttled: the case proves nothing"
    assert by_controller + load.refused == rejected  # every refusal of the identity seen, and counted once
    for node in (*autos, waiting):
        assert_one_clean_reset(ctl, node)
        ctl.wait_reason(node, EVENT_SUCCEEDED)
        assert ctl.reasons(node).count(EVENT_SUCCEEDED) == 1
    rec: dict[str, Any] = ctl.records(waiting)[0]
    assert [s["phase"] for s in rec["status"]["steps"]].count("AwaitingApproval") == 1
