"""Where a failed repair is announced besides the node's events."""

from __future__ import annotations

import pytest


def test_webhook_notifier_posts_json_and_survives_a_dead_endpoint() -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from autoclusters.controller.notifier import WebhookNotifier

    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    WebhookNotifier(f"http://127.0.0.1:{server.server_address[1]}/hook").notify("repair failed", {"node": "n1"})
    server.server_close()
    assert got == [{"subject": "repair failed", "details": {"node": "n1"}}]
    WebhookNotifier("http://127.0.0.1:9/nowhere", timeout=0.5).notify("x", {})  # logged, not raised
    with pytest.raises(ValueError):
        WebhookNotifier("ftp://example.invalid/")
