"""The integration tests' TCP proxy (tests/integration/tcp_proxy.py) against an echo server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.integration.tcp_proxy import TcpProxy


@pytest.fixture()
def echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


def _connect(proxy: TcpProxy) -> socket.socket:
    s = socket.create_connection((proxy.host, proxy.port), timeout=5)
    return s


def _no_answer(s: socket.socket) -> None:
    """Nothing comes back, and the line is not closed either (a close would read b"")."""
    s.settimeout(0.3)
    with pytest.raises(TimeoutError):
        s.recv(10)


def test_forwards_then_black_holes_without_closing_then_restores_for_new_connections(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy:
        old = _connect(proxy)
        old.sendall(b"ping")
        assert old.recv(10) == b"ping"

        proxy.black_hole()
        assert proxy.black_holed
        old.sendall(b"lost")
        _no_answer(old)  # the old connection: bytes dropped, not closed
        new = _connect(proxy)  # accepted and held
        new.sendall(b"also lost")
        _no_answer(new)
        assert proxy.dropped >= len(b"lost") + len(b"also lost")

        proxy.restore()
        fresh = _connect(proxy)
        fresh.sendall(b"back")
        assert fresh.recv(10) == b"back"
        old.sendall(b"still dead")  # a line that lost bytes stays dead until its client gives up
        _no_answer(old)
        assert proxy.open_links() == 3
        old.close()
        for s in (new, fresh):
            s.close()


def test_a_closed_client_closes_its_upstream(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy:
        s = _connect(proxy)
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        s.close()
        deadline = threading.Event()
        for _ in range(50):
            if proxy.open_links() == 0:
                break
            deadline.wait(0.05)
        assert proxy.open_links() == 0
