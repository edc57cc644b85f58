"""The pre-drain hook runs off the reconcile workers, bounded in time and in what it keeps, and
what it says reaches events and logs only redacted; so do the other paths a URL or a
program's output takes out of the controller (``autoclusters.redact``, the one redaction):
a pool's Valid condition and its event, and the command provider's failure in the
Remediation record, its events and the log. (The notifier's: test_notifier.py.)

The controller's real pieces in the deterministic harness; the hooks are a real subprocess
and a real HTTP server on 127.0.0.1. Where the hook runs on the runner's real threads, the
test waits (bounded, in real time) only for what the hook itself does.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api, pool_fields
from autoclusters import names as n
from autoclusters.controller.hook import HookRunner
from autoclusters.kube.events import MAX_MESSAGE
from autoclusters.sim.hosts import REBOOT
from tests.unit.controller.harness import Harness

SECRET = "s3cr3t-value"


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def _evictions(h: Harness) -> int:
    return sum(1 for r in h.api.requests if r.verb == "POST" and r.resource == "pods/eviction")


def _hook_failed(h: Harness) -> list[str]:
    return [e["message"] for e in h.events(n.EVENT_HOOK_FAILED)]


class _HeldHook:
    """An HTTP hook on 127.0.0.1 that holds each request until ``release`` is set, then answers
    500 with a body far longer than the capture that names a secret at its start."""

    def __init__(self) -> None:
        self.got = threading.Event()
        self.release = threading.Event()
        self.requests: list[tuple[str, str]] = []  # (path, Authorization)
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                hook.requests.append((self.path, self.headers.get("Authorization", "")))
                hook.got.set()
                hook.release.wait(20)
                body = (f"denied: token={SECRET} " + "x" * 20000).encode()
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _until(h: Harness, what: Callable[[], bool], seconds: float = 20) -> None:
    """Reconciles (a fake second at a time) until ``what``, the hook's thread running meanwhile."""
    end = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < end, f"not there in time; the record is {h.phase('n1')}"
        h.run(what, seconds=1)
        time.sleep(0.005)


def test_a_reconcile_never_waits_for_the_hook_and_nothing_is_evicted_before_it_ends(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    hook = _HeldHook()
    h.actuator.hooks = HookRunner(requeue=h.queue.add, lists=h.lists)  # the runner's real threads
    try:
        url = f"http://alice:{SECRET}@127.0.0.1:{hook.port}/predrain?sig={SECRET}"
        h.node("n1")
        h.pod("n1", "train")
        h.pool(preDrain={"waitSeconds": 0, "hook": {"url": url, "timeoutSeconds": 30}})
        h.start()
        h.fault("n1")
        caplog.set_level(logging.INFO)
        _until(h, hook.got.is_set)
        # The server holds the hook's request, and the reconciles go on: the one that started the
        # hook returned, and the ones since decided to wait for it (a reconcile that waited on
        # the hook could not have returned while the server holds it).
        record = h.records("n1")[0]["metadata"]["name"]
        assert h.actuator.hooks.running(record) and not hook.release.is_set()
        looks = h.run(seconds=10)
        assert "n1" in looks and h.phase("n1") == "Draining" and _evictions(h) == 0
        assert _hook_failed(h) == []
        # the URL's user information went as basic authentication, its query as sent
        assert hook.requests == [(f"/predrain?sig={SECRET}",
                                  "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode())]
        hook.release.set()
        _until(h, lambda: bool(_hook_failed(h)))
        message = _hook_failed(h)[0]
        assert f"POST http://***@127.0.0.1:{hook.port}/predrain?sig=*** answered HTTP 500" in message
        assert f"HTTP 500: [only the first {api.OUTPUT_CAPTURE_BYTES} bytes kept] denied: token=*** xxx" in message
        assert f"[cut after the first {api.OUTPUT_REPORT_CHARS} characters]" in message
        assert len(message) < MAX_MESSAGE
        _until(h, lambda: _evictions(h) > 0)  # the drain goes on once the hook has ended
        assert len(hook.requests) == 1  # called once
        assert SECRET not in caplog.text and "alice" not in caplog.text
        assert "answered HTTP 500" in caplog.text  # the failure is logged too, redacted
    finally:
        hook.close()
        h.actuator.hooks.close()


def test_a_command_hook_runs_on_its_own_thread_and_its_output_is_reported_bounded_and_redacted(
        h: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ran = tmp_path / "ran"
    script = (f"import sys; open({str(ran)!r}, 'a').write('x'); sys.stderr.write('e' * 100000); "
              f"sys.stderr.write(' cannot reach https://ops:{SECRET}@api.example/v1?token={SECRET} "
              f"password={SECRET}'); sys.exit(4)")
    h.node("n1")
    h.pool(preDrain={"waitSeconds": 0, "hook": {"command": [sys.executable, "-c", script]}})
    h.start()
    h.fault("n1")
    caplog.set_level(logging.INFO)
    h.run(lambda: len(h.hook_threads.pending) == 1)
    # The reconcile that warned returned with the hook handed to the runner, not run, and the
    # provider not asked (nothing to evict, nobody to wait for: the operation is recorded, its
    # call waits for the hook's end).
    assert h.phase("n1") == "Acting" and not ran.exists()
    assert REBOOT not in (h.node_obj("n1") or {})["metadata"].get("annotations", {})
    h.run(lambda: bool(_hook_failed(h)))
    assert ran.read_text() == "x"  # run once
    h.run(lambda: h.hosts.reboots == 1)  # then the provider is asked: the reset goes on
    message = _hook_failed(h)[0]
    assert f"exited 4: [only the last {api.OUTPUT_CAPTURE_BYTES} bytes kept] [cut to the last" in message
    assert "cannot reach https://***@api.example/v1?token=*** password=***" in message
    assert SECRET not in caplog.text and SECRET not in message and "exited 4" in caplog.text


def _valid(h: Harness) -> dict[str, Any]:
    """The pool's Valid condition, once the controller has looked at the pool."""
    h.start()
    h.run()
    pool = h.api.read(h.pool_path("p"))
    assert pool is not None
    return dict(next(c for c in pool["status"]["conditions"] if c["type"] == "Valid"))


def test_a_hooks_timeout_above_the_maximum_is_refused_with_the_setting_named(h: Harness) -> None:
    limit = pool_fields.PRE_DRAIN_HOOK_TIMEOUT_SECONDS
    assert limit.maximum is not None
    h.pool(preDrain={"hook": {"command": ["/bin/true"], "timeoutSeconds": limit.maximum + 1}})
    valid = _valid(h)
    assert valid["status"] == "False"
    assert f"preDrain.hook.timeoutSeconds must be an integer in 1..{limit.maximum}, got {limit.maximum + 1}" \
        in valid["message"]


def test_an_invalid_hook_url_shows_in_the_pools_condition_and_event_redacted(h: Harness) -> None:
    h.pool(preDrain={"hook": {"url": f"ftp://ops:{SECRET}@files.example/drop?token={SECRET}"}})
    valid = _valid(h)
    assert valid["status"] == "False"
    assert "preDrain.hook.url 'ftp://***@files.example/drop?token=***' must be an http:// or https:// URL" \
        in valid["message"]
    events = [e["message"] for e in h.events() if e["involvedObject"]["kind"] == "GpuNodePool"]
    assert events and all(SECRET not in m for m in events) and any("ftp://***@files.example" in m for m in events)


def test_a_failing_provider_scripts_output_reaches_the_record_events_and_log_redacted(
        h: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "reset.py"
    script.write_text("import sys\n"
                      f"sys.stderr.write('e' * 100000 + '\\nlogin to https://root:{SECRET}@bmc.example/redfish "
                      f"failed, password={SECRET}\\n')\n"
                      "sys.exit(5)\n")
    h.node("n1")
    h.pool(provider={"type": "command", "command": {"command": [sys.executable, str(script)]}})
    h.start()
    caplog.set_level(logging.INFO)
    h.fault("n1")
    end = time.monotonic() + 20
    while not any("reset failed" in st["message"] for r in h.records("n1") for st in r["status"].get("steps", [])):
        assert time.monotonic() < end, f"the reset did not fail in time ({h.phase('n1')})"
        h.run(seconds=1)  # the script runs on the provider's thread, in real time
        time.sleep(0.005)
    shown = "exited 5: login to https://***@bmc.example/redfish failed, password=***"
    record = json.dumps(h.records("n1")[0])
    assert shown in record and SECRET not in record
    events = " ".join(e["message"] for e in h.events())
    assert shown in events and SECRET not in events
    assert SECRET not in caplog.text and "exited 5" in caplog.text
