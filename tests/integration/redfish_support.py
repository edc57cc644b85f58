"""BMCs for the redfish provider's tests, all on 127.0.0.1.

- ``Emulator``: sushy-tools' ``sushy-emulator`` (OpenStack's Redfish BMC emulator) with its fake
  driver. What that driver does (sushy_tools/emulator/resources/systems/fakedriver.py, 2.2.0):
  a ``*Restart`` reset sets the system Off at once and queues On 1-11 s later; ``On`` queues On;
  ``PowerCycle`` is not supported (so it does not advertise it: the template's allowable values
  are On, ForceOff, GracefulShutdown, GracefulRestart, ForceRestart, Nmi, ForceOn); a queued
  change is applied when the system is next read. With ``external_notifier`` it PUTs the
  system's state to ``EXTERNAL_NOTIFICATION_URL`` at every change, which ``PowerNotices``
  receives: its Off -> On transition is the moment the simulated host boots again. With
  ``SUSHY_EMULATOR_AUTH_FILE`` (bcrypt htpasswd) it answers 401 to wrong credentials: the BMC
  that refuses. ``--ssl-certificate``/``--ssl-key`` serve TLS.
- What the emulator cannot be made to do, small real servers do: ``SilentBmc`` accepts TCP
  connections and never answers (the BMC that times out); ``OffBmc`` is a minimal Redfish
  service whose one system accepts every reset and is powered off from then on.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt

from autoclusters.certificates import KeyPair
from tests.integration.helpers import wait_for

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class PowerNotices:
    """Receives the emulator's notifications; calls ``on_boot(uuid)`` at each Off -> On."""

    def __init__(self, on_boot: Callable[[str], None]) -> None:
        self.on_boot = on_boot
        self.states: dict[str, list[str]] = {}  # uuid -> the power states notified, in order
        self._lock = threading.Lock()
        notices = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                self.send_response(204)
                self.end_headers()
                notices.notice(str(body.get("uuid", "")), str(body.get("power_state", "")))

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def notice(self, uuid: str, state: str) -> None:
        with self._lock:
            seen = self.states.setdefault(uuid, [])
            booted = bool(seen) and seen[-1] == "Off" and state == "On"
            seen.append(state)
        if booted:
            self.on_boot(uuid)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def emulator(workdir: Path, systems: list[str], *, tls: KeyPair, user: str, password: str,
             notify_url: str) -> Iterator[str]:
    """sushy-emulator with the fake driver, one system per uuid (powered on), over TLS with
    ``tls``, accepting ``user``/``password`` only; yields its base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cert.pem").write_bytes(tls.cert_pem)
    (workdir / "key.pem").write_bytes(tls.key_pem)
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    (workdir / "htpasswd").write_text(f"{user}:{digest}\n")
    fake = [{"uuid": u, "name": f"gpu-{i}", "power_state": "On", "external_notifier": True,
             "nics": [{"mac": f"00:5c:52:31:3a:{i:02x}", "ip": f"172.22.0.{100 + i}"}]}
            for i, u in enumerate(systems)]
    config = workdir / "emulator.conf"
    config.write_text(f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
                      f"SUSHY_EMULATOR_STATE_DIR = {str(workdir / 'state')!r}\n"
                      f"SUSHY_EMULATOR_AUTH_FILE = {str(workdir / 'htpasswd')!r}\n"
                      f"EXTERNAL_NOTIFICATION_URL = {notify_url!r}\n")
    port = free_port()
    exe = Path(sys.executable).with_name("sushy-emulator")
    log = (workdir / "emulator.log").open("ab")
    proc = subprocess.Popen([str(exe), "--fake", "--config", str(config), "--interface", HOST, "--port", str(port),
                             "--ssl-certificate", str(workdir / "cert.pem"), "--ssl-key", str(workdir / "key.pem")],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("sushy-emulator listening", lambda: _listening(port) or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, (workdir / "emulator.log").read_text()
        yield f"https://{HOST}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


class SilentBmc:
    """Accepts connections (the kernel completes the handshake) and never answers."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind((HOST, 0))
        self._sock.listen(16)
        self.url = f"http://{HOST}:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._sock.close()


class OffBmc:
    """A minimal Redfish service (the resources sushy reads: the service root and one
    ComputerSystem with its Reset action) whose system is on, accepts every reset, and is off
    from the first one on, for good."""

    SYSTEM = "/redfish/v1/Systems/1"

    def __init__(self) -> None:
        self.resets: list[str] = []
        bmc = self
        root = {"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Id": "RootService",
                "Name": "Root Service", "RedfishVersion": "1.5.0", "UUID": "6a1c6b47-2f2b-4d3e-9c2b-1f1f0d7a0001",
                "Systems": {"@odata.id": "/redfish/v1/Systems"}}
        system = {"@odata.id": self.SYSTEM, "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem", "Id": "1",
                  "Name": "stays-off", "PowerState": "On",
                  "Actions": {"#ComputerSystem.Reset": {
                      "target": f"{self.SYSTEM}/Actions/ComputerSystem.Reset",
                      "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart"]}}}

        class Handler(BaseHTTPRequestHandler):
            def _json(self, code: int, body: dict[str, Any] | None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.rstrip("/")
                docs: dict[str, dict[str, Any]] = {"/redfish/v1": root, "/redfish": {"v1": "/redfish/v1/"},
                                                   bmc.SYSTEM: system}
                found = docs.get(path)
                self._json(200, found) if found else self._json(404, {"error": {"message": f"no {path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.rstrip("/").endswith("ComputerSystem.Reset"):
                    bmc.resets.append(str(body.get("ResetType")))
                    system["PowerState"] = "Off"
                    self._json(204, None)
                else:
                    self._json(404, {"error": {"message": "no such action"}})

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
