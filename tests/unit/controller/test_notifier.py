"""Where a failed repair is announced besides the node's events; its URL (which may carry
credentials) is logged only redacted, the credentials sent as basic authentication."""

from __future__ import annotations

import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from autoclusters.controller.notifier import WebhookNotifier

SECRET = "s3cr3t-value"


def _serve_once(got: list[tuple[str, str, object]]) -> HTTPServer:
    """A server on 127.0.0.1 that answers one POST with 204, noting (path, Authorization, body)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.append((self.path, self.headers.get("Authorization", ""), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    return server


def test_webhook_notifier_posts_json_and_survives_a_dead_endpoint() -> None:
    got: list[tuple[str, str, object]] = []
    server = _serve_once(got)
    WebhookNotifier(f"http://127.0.0.1:{server.server_address[1]}/hook").notify("repair failed", {"node": "n1"})
    server.server_close()
    assert got == [("/hook", "", {"subject": "repair failed", "details": {"node": "n1"}})]
    WebhookNotifier("http://127.0.0.1:9/nowhere", timeout=0.5).notify("x", {})  # logged, not raised
    with pytest.raises(ValueError):
        WebhookNotifier("ftp://example.invalid/")


def test_the_notifier_logs_its_url_redacted_and_sends_its_credentials_as_basic_auth(
        caplog: pytest.LogCaptureFixture) -> None:
    got: list[tuple[str, str, object]] = []
    server = _serve_once(got)
    try:
        port = server.server_address[1]
        WebhookNotifier(f"http://bot:{SECRET}@127.0.0.1:{port}/notify?key={SECRET}").notify("failed", {"node": "n1"})
    finally:
        server.server_close()
    assert got == [(f"/notify?key={SECRET}", "Basic " + base64.b64encode(f"bot:{SECRET}".encode()).decode(),
                    {"subject": "failed", "details": {"node": "n1"}})]
    with caplog.at_level(logging.WARNING):
        WebhookNotifier(f"http://bot:{SECRET}@127.0.0.1:9/nowhere?token={SECRET}", timeout=0.5).notify("x", {})
    assert "notifier http://***@127.0.0.1:9/nowhere?token=*** failed" in caplog.text and SECRET not in caplog.text
    with pytest.raises(ValueError) as refused:
        WebhookNotifier(f"ftp://bot:{SECRET}@files.example/")
    assert SECRET not in str(refused.value) and "ftp://***@files.example/" in str(refused.value)
