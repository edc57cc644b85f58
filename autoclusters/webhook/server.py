"""The aiohttp application: ``/validate`` (AdmissionReview v1), ``/healthz``, ``/readyz``
and ``/metrics``.

The request path only parses JSON, awaits OPA and writes JSON. Certificate renewal and
the caBundle write run in a background task (the Kubernetes call in a thread), never on a
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autoclusters.webhook import review
from autoclusters.webhook.decider import OpaDecider
from autoclusters.webhook.webhook_metrics import BAD_REQUEST, WebhookMetrics

log = logging.getLogger(__name__)


class Certificates(Protocol):
    @property
    def context(self) -> Any: ...

    @property
    def not_after(self) -> datetime | None: ...  # of the certificate loaded

    def ensure(self) -> bool: ...


# Called (in a thread) with nothing when the CA bundle changed; writes it where the API server reads it.
BundleWriter = Callable[[], None]


@dataclass
class WebhookSettings:
    check_interval: float = 300.0  # how often certificates are checked for renewal
    opa_config: dict[str, Any] | None = None  # pushed to data.autoclusters.config at start


class Webhook:
    def __init__(self, decider: OpaDecider, certs: Certificates | None, *, settings: WebhookSettings | None = None,
                 bundle_writer: BundleWriter | None = None) -> None:
        self.decider = decider
        self.certs = certs
        self.settings = settings or WebhookSettings()
        self.bundle_writer = bundle_writer
        self.metrics = WebhookMetrics()
        self._maintenance: asyncio.Task[None] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/validate", self.validate)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    # --- request path -----------------------------------------------------------------
    async def validate(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        try:
            body = json.loads(await request.read())
            req = review.parse(body)
        except (ValueError, review.BadReview) as e:
            self.metrics.reviews.labels(BAD_REQUEST).inc()
            return web.json_response({"error": str(e)}, status=400)
        decision = await self.decider.decide(req)
        self.metrics.reviews.labels(decision.outcome).inc()
        if decision.extra.get("timed_out"):
            self.metrics.opa_timeouts.inc()
        for v in decision.violations:
            self.metrics.violations.labels(v.rule).inc()
        out = review.response(req["uid"], decision)
        self.metrics.latency.observe(time.perf_counter() - start)
        return web.json_response(out)

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, _: web.Request) -> web.Response:
        if not await self.decider.ready():
            return web.Response(status=503, text=f"OPA at {self.decider.url} is not healthy")
        return web.Response(text="ok")

    async def metrics_endpoint(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- lifecycle ----------------------------------------------------------------------
    async def _on_startup(self, _: web.Application) -> None:
        await self.decider.start()
        if self.settings.opa_config is not None:
            await _retry(lambda: self.decider.push_config(self.settings.opa_config or {}), "push policy config to OPA")
        if self.certs is not None:
            # The first pass always writes the bundle: a configuration re-applied with a stale
            # caBundle (or one written before this CA existed) is corrected at every start.
            await self._renew(force_bundle=True)
            self._maintenance = asyncio.create_task(self._maintain())

    async def _on_cleanup(self, _: web.Application) -> None:
        if self._maintenance:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        await self.decider.close()

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(self.settings.check_interval)
            try:
                await self._renew()
            except Exception:
                log.exception("certificate renewal failed; will retry in %ss", self.settings.check_interval)

    async def _renew(self, *, force_bundle: bool = False) -> None:
        assert self.certs is not None
        changed = await asyncio.to_thread(self.certs.ensure)
        if self.certs.not_after is not None:
            self.metrics.certificate_expiry.set(self.certs.not_after.timestamp())
        if (changed or force_bundle) and self.bundle_writer is not None:
            await asyncio.to_thread(self.bundle_writer)


async def _retry(call: Callable[[], Awaitable[Any]], what: str, attempts: int = 20, delay: float = 0.5) -> None:
    for i in range(attempts):
        try:
            await call()
            return
        except Exception as e:
            if i == attempts - 1:
                raise
            log.info("%s failed (%s); retrying", what, e)
            await asyncio.sleep(delay)
