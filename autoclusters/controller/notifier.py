"""Where a failed repair is announced besides the node's events (docs/contract.md, "When a repair does not work")."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any, Protocol

from autoclusters import api
from autoclusters.capture import json_post, read_bounded
from autoclusters.redact import redact

log = logging.getLogger(__name__)


class Notifier(Protocol):
    def notify(self, subject: str, details: dict[str, Any]) -> None: ...


class LogNotifier:
    def notify(self, subject: str, details: dict[str, Any]) -> None:
        log.warning("NOTIFY %s %s", subject, json.dumps(details, sort_keys=True, default=str))


class WebhookNotifier:
    """POSTs ``{"subject", "details"}`` as JSON; a failed delivery is logged, never fatal. The URL
    (it may carry credentials) is logged only redacted."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"notifier URL {redact(url)!r} must be http(s)")
        self._url = url
        self._timeout = timeout

    def notify(self, subject: str, details: dict[str, Any]) -> None:
        body = json.dumps({"subject": subject, "details": details}, default=str).encode()
        try:
            with urllib.request.urlopen(json_post(self._url, body), timeout=self._timeout) as resp:
                read_bounded(resp, api.OUTPUT_CAPTURE_BYTES)
        except (OSError, ValueError) as e:
            log.warning("notifier %s failed: %s", redact(self._url), redact(str(e)))
