"""Asking OPA for a decision: one ``AsyncOpaClient`` (one aiohttp session, reused),
a short timeout and no retries, because the API server's own webhook timeout is only a
few seconds and a late answer is as bad as none.

The time-out (``--opa-timeout``, ``OPA_TIMEOUT_SECONDS``) is below the webhook configuration's
``timeoutSeconds`` (``WEBHOOK_TIMEOUT_SECONDS``; a test in ``tests/unit/webhook/test_server.py``
holds them apart): an OPA that
takes the connection and never answers gets the webhook's own denial, which says so, rather
than the API server's "context deadline exceeded"."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opa_client.opa_async import AsyncOpaClient

from autoclusters.deploy.admission import OPA_TIMEOUT_SECONDS
from autoclusters.webhook import review

log = logging.getLogger(__name__)

PACKAGE = "autoclusters/admission"
RULE = "decision"


class OpaDecider:
    def __init__(self, opa_url: str, *, timeout: float = OPA_TIMEOUT_SECONDS) -> None:
        u = urlsplit(opa_url)
        self.client = AsyncOpaClient(host=u.hostname or "127.0.0.1", port=u.port or 8181,
                                     ssl=u.scheme == "https", retries=0, timeout=timeout)
        self.url = opa_url
        self.timeout = timeout

    async def start(self) -> None:
        await self.client.__aenter__()  # opens the one aiohttp session every query reuses

    async def close(self) -> None:
        await self.client.close_connection()

    async def ready(self) -> bool:
        try:
            return bool(await self.client.check_health())
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def push_config(self, config: dict[str, Any]) -> None:
        """Writes ``data.autoclusters.config`` so the policies know this installation's names."""
        await self.client.update_or_create_data(config, "autoclusters/config")

    async def decide(self, request: dict[str, Any]) -> review.AdmissionDecision:
        uid = request["uid"]
        try:
            reply = await self.client.query_rule(review.opa_input(request), PACKAGE, RULE)
        except TimeoutError:  # aiohttp's time-outs (ServerTimeoutError too) are TimeoutErrors
            log.warning("OPA gave no decision for uid=%s within %gs", uid, self.timeout)
            return review.timed_out(self.timeout)
        except (aiohttp.ClientError, OSError, ValueError) as e:
            log.warning("OPA query failed for uid=%s: %s", uid, e or type(e).__name__)
            return review.unavailable(type(e).__name__ if not str(e) else str(e))
        decision = review.from_opa(uid, reply)
        log.info("decision uid=%s allowed=%s outcome=%s opa_decision_id=%s user=%s op=%s %s/%s rules=%s",
                 uid, decision.allowed, decision.outcome, decision.decision_id,
                 (request.get("userInfo") or {}).get("username"), request.get("operation"),
                 (request.get("kind") or {}).get("kind"), request.get("name"),
                 ",".join(v.rule for v in decision.violations) or "-")
        return decision
