"""EC2 for the ec2 provider's tests, all on 127.0.0.1.

- ``moto``'s server mode (``moto.server.ThreadedMotoServer``): an emulator of AWS that speaks
  EC2's wire protocol (the Query API: form-encoded POSTs, XML answers). It is not EC2: its
  instances change state at once (a stop is ``stopped`` when the call returns), nothing boots.
- ``Ec2Proxy``: a small real HTTP proxy in front of it, the endpoint the controller is given
  (boto3's ``AWS_ENDPOINT_URL_EC2``). It counts every call by its ``Action`` (asked: what the
  controller sent; done: what reached moto and succeeded), answers the first calls of an
  action with EC2's throttling error when told to (moto cannot throttle), and reports each
  RebootInstances / StartInstances moto carried out: the moment the instance's host boots.
  While ``stopping`` is set it answers DescribeInstances of a stopped instance as still
  ``stopping`` (a real stop takes minutes; moto's takes none), counting those answers.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from moto.server import ThreadedMotoServer

from tests.integration.redfish_support import HOST, free_port

# EC2's error answer (EC2 API Reference, "Error codes": the Response/Errors/Error document)
THROTTLED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code>'
             b'<Message>Request limit exceeded.</Message></Error></Errors>'
             b'<RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>')
BOOTS = ("RebootInstances", "StartInstances")
STOPPED = b"<name>stopped</name>"  # an instance's state in moto's DescribeInstances answer


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on a free port of 127.0.0.1; yields its URL."""
    port = free_port()
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.stop()


class Ec2Proxy:
    def __init__(self, upstream: str, on_boot: Callable[[str, str], None]) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.on_boot = on_boot  # (instance id, action)
        self.asked: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.throttle: Counter[str] = Counter()  # action -> how many of its next calls to throttle
        self.stopping = threading.Event()
        self.said_stopping = 0  # DescribeInstances answered "stopping" for a stopped instance
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                form = parse_qs(body.decode())
                action = (form.get("Action") or [""])[0]
                with proxy._lock:
                    proxy.asked[action] += 1
                    throttled = proxy.throttle[action] > 0
                    if throttled:
                        proxy.throttle[action] -= 1
                if throttled:
                    self._answer(503, THROTTLED, "text/xml")
                    return
                status, data, kind = proxy.forward(self.path, body, dict(self.headers))
                if action == "DescribeInstances" and proxy.stopping.is_set() and STOPPED in data:
                    data = data.replace(STOPPED, b"<name>stopping</name>")
                    with proxy._lock:
                        proxy.said_stopping += 1
                self._answer(status, data, kind)
                if status == 200:
                    with proxy._lock:
                        proxy.done[action] += 1
                    if action in BOOTS:
                        proxy.on_boot((form.get("InstanceId.1") or [""])[0], action)

            def _answer(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def forward(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            conn.request("POST", path, body, {k: v for k, v in headers.items() if k.lower() != "host"})
            answer = conn.getresponse()
            return answer.status, answer.read(), answer.getheader("Content-Type") or "text/xml"
        finally:
            conn.close()

    def counts(self) -> dict[str, int]:
        """What reached moto and succeeded, by action (DescribeInstances left out)."""
        with self._lock:
            return {a: n for a, n in self.done.items() if a != "DescribeInstances"}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
