"""The webhook over real HTTPS against a real OPA server (the project's binary), on loopback."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509

from autoclusters.clock import FakeClock
from autoclusters.names import Names
from autoclusters.rego import opa
from autoclusters.webhook.certs import CertManager, CertPolicy, CertStore
from autoclusters.webhook.decider import OpaDecider
from autoclusters.webhook.server import Webhook, WebhookSettings
from tests.conftest import tool_missing

SAMPLES = Path(__file__).resolve().parents[3] / "examples" / "policy-samples" / "admission"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_opa(*load: str) -> tuple[subprocess.Popen[bytes], str]:
    try:
        binary = opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    port = _free_port()
    proc = subprocess.Popen([str(binary), "run", "--server", f"--addr=127.0.0.1:{port}", "--log-level=error",
                             "--set=decision_logs.console=true", *load],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("OPA did not start")


@pytest.fixture(scope="module")
def opa_url() -> Iterator[str]:
    proc, url = _start_opa(*(f"--ignore={p}" for p in opa.IGNORE), str(opa.policies_dir()))
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def empty_opa_url() -> Iterator[str]:
    proc, url = _start_opa()
    yield url
    proc.terminate()
    proc.wait(10)


class Running:
    def __init__(self, webhook: Webhook, certs: CertManager, port: int) -> None:
        self.webhook, self.certs, self.port = webhook, certs, port
        self.client_ctx = ssl.create_default_context(cadata=certs.ca_bundle().decode())

    async def post(self, session: aiohttp.ClientSession, body: Any) -> tuple[int, Any]:
        async with session.post(f"https://127.0.0.1:{self.port}/validate", json=body, ssl=self.client_ctx) as r:
            return r.status, await r.json()

    async def get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        async with session.get(f"https://127.0.0.1:{self.port}{path}", ssl=self.client_ctx) as r:
            return r.status, await r.text()


async def _serve(url: str, certs: CertManager, body: Any) -> Any:
    webhook = Webhook(OpaDecider(url, timeout=0.5), certs, settings=WebhookSettings(check_interval=3600))
    runner = web.AppRunner(webhook.app())
    await runner.setup()
    port = _free_port()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=certs.context)
    await site.start()
    try:
        async with aiohttp.ClientSession() as session:
            return await body(Running(webhook, certs, port), session)
    finally:
        await runner.cleanup()


def _certs(tmp_path: Path, clock: FakeClock | None = None) -> CertManager:
    return CertManager(CertStore(tmp_path), ["127.0.0.1"], clock or FakeClock(dt.datetime.now(dt.UTC)),
                       CertPolicy(serving_lifetime=dt.timedelta(days=9)))


def _sample(kind: str, name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / kind / f"{name}.json").read_text())


def test_decisions_follow_the_policy_and_carry_the_rule_and_decision_id(
        opa_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autoclusters.webhook.decider")

    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        status, ok = await w.post(s, _sample("allowed", "user-approves-while-required"))
        assert status == 200 and ok["response"]["allowed"] is True
        status, no = await w.post(s, _sample("disallowed", "maintenance-approved-requires-fault.fault-cleared"))
        resp = no["response"]
        assert resp["allowed"] is False and resp["uid"] == "6f1b2c3d-0000-4000-8000-000000000001"
        assert resp["status"]["message"].startswith("[maintenance-approved-requires-fault] the node no longer needs")
        decision_id = resp["auditAnnotations"]["opa-decision-id"]
        assert any(decision_id in r.getMessage() for r in caplog.records)
        _, metrics = await w.get(s, "/metrics")
        assert 'autoclusters_webhook_reviews_total{outcome="denied"} 1.0' in metrics
        assert 'autoclusters_webhook_violations_total{rule="maintenance-approved-requires-fault"} 1.0' in metrics

    asyncio.run(_serve(opa_url, _certs(tmp_path), body))


def test_undefined_decision_is_a_denial(empty_opa_url: str, tmp_path: Path) -> None:
    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        _, out = await w.post(s, _sample("allowed", "user-approves-while-required"))
        assert out["response"]["allowed"] is False
        assert "undefined" in out["response"]["status"]["message"]

    asyncio.run(_serve(empty_opa_url, _certs(tmp_path), body))


def test_opa_down_is_a_fast_denial_and_not_ready(tmp_path: Path) -> None:
    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        start = time.monotonic()
        _, out = await w.post(s, _sample("allowed", "user-approves-while-required"))
        assert time.monotonic() - start < 2
        assert out["response"]["allowed"] is False and out["response"]["status"]["code"] == 500
        assert (await w.get(s, "/readyz"))[0] == 503
        assert (await w.get(s, "/healthz"))[0] == 200

    asyncio.run(_serve(f"http://127.0.0.1:{_free_port()}", _certs(tmp_path), body))


def test_opa_that_never_answers_is_a_timed_denial_that_says_so_and_is_counted(tmp_path: Path) -> None:
    """A stand-in for a frozen OPA: a socket that takes connections (the kernel's backlog) and
    never answers. The webhook answers on its own time-out (0.5 s here), denies, and says why."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"

        async def body(w: Running, s: aiohttp.ClientSession) -> None:
            start = time.monotonic()
            _, out = await w.post(s, _sample("allowed", "user-approves-while-required"))
            took = time.monotonic() - start
            assert 0.5 <= took < 2, took
            resp = out["response"]
            assert resp["allowed"] is False and resp["status"]["code"] == 500
            assert "the policy engine did not answer in time (no decision within 0.5s)" in resp["status"]["message"]
            _, metrics = await w.get(s, "/metrics")
            assert "autoclusters_webhook_opa_timeouts_total 1.0" in metrics
            assert 'autoclusters_webhook_reviews_total{outcome="error"} 1.0' in metrics

        asyncio.run(_serve(url, _certs(tmp_path), body))


def test_opa_refusing_connections_is_an_error_but_no_timeout(tmp_path: Path) -> None:
    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        _, out = await w.post(s, _sample("allowed", "user-approves-while-required"))
        assert "could not decide" in out["response"]["status"]["message"]
        _, metrics = await w.get(s, "/metrics")
        assert "autoclusters_webhook_opa_timeouts_total 0.0" in metrics

    asyncio.run(_serve(f"http://127.0.0.1:{_free_port()}", _certs(tmp_path), body))


def test_the_webhooks_opa_timeout_is_below_the_configurations_timeout() -> None:
    """The webhook must answer before the API server gives up on it (``timeoutSeconds``), or
    a hung OPA reads as the API server's "context deadline exceeded", not as our denial."""
    import inspect

    from autoclusters.cli import webhook as cli
    from autoclusters.deploy.admission import OPA_TIMEOUT_SECONDS, webhook_configuration

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["webhook", "run"])
    hooks = webhook_configuration(Names(), ca_bundle=b"ca")["webhooks"]
    assert {h["timeoutSeconds"] for h in hooks} == {3}
    assert 0 < args.opa_timeout == OPA_TIMEOUT_SECONDS < 3
    assert inspect.signature(OpaDecider).parameters["timeout"].default == OPA_TIMEOUT_SECONDS


def test_bad_request_is_400(opa_url: str, tmp_path: Path) -> None:
    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        assert (await w.post(s, {"kind": "Node"}))[0] == 400
        assert (await w.get(s, "/readyz"))[0] == 200

    asyncio.run(_serve(opa_url, _certs(tmp_path), body))


def test_renewed_certificate_is_served_without_a_restart(opa_url: str, tmp_path: Path) -> None:
    clock = FakeClock(dt.datetime.now(dt.UTC))
    certs = _certs(tmp_path, clock)

    # The fake clock is days ahead, so the renewed certificate is "not yet valid" for real time:
    # read the served certificate without verifying it.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE

    async def peer_serial(w: Running) -> int:
        _, writer = await asyncio.open_connection("127.0.0.1", w.port, ssl=unverified)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return x509.load_der_x509_certificate(der).serial_number

    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        first = await peer_serial(w)
        clock.advance(dt.timedelta(days=7).total_seconds())
        await w.webhook._renew()
        second = await peer_serial(w)
        assert second != first
        assert second == x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes()).serial_number

    asyncio.run(_serve(opa_url, certs, body))


def test_pool_writes_are_checked(opa_url: str, tmp_path: Path) -> None:
    def pool_review(mode: object) -> dict[str, Any]:
        pool = {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool",
                "metadata": {"name": "h100"}, "spec": {"consentMode": mode}}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "p-1", "kind": {"group": "remediation.autoclusters.io", "version": "v1alpha1",
                                   "kind": "GpuNodePool"},
            "operation": "CREATE", "userInfo": {"username": "alice"}, "object": pool, "oldObject": None}}

    async def body(w: Running, s: aiohttp.ClientSession) -> None:
        _, ok = await w.post(s, pool_review("propose"))
        assert ok["response"]["allowed"] is True
        _, no = await w.post(s, pool_review(False))
        assert no["response"]["allowed"] is False
        assert no["response"]["status"]["message"].startswith("[pool-consent-mode] spec.consentMode false")

    asyncio.run(_serve(opa_url, _certs(tmp_path), body))
