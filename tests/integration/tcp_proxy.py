"""A TCP proxy a test controls, to cut a process off from a server without touching either.

``forward``: bytes pass both ways. ``black_hole()``: the network is gone without a word, as
a dropped route or a dead switch looks from both ends: new connections are accepted and held
open (never answered, never passed on), and every byte on a connection, new or old, in
either direction, is read and dropped; nothing is closed. ``restore()``: new connections are
passed on again; a connection that lost bytes stays a dead line (its TLS stream is broken;
on a real network its peer's state would be gone), until one end closes it, as a client
times out on a real network. Threads, one pair per connection; ``close()`` ends them all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class _Link:
    client: socket.socket
    upstream: socket.socket | None
    dead: bool = False  # it lost bytes: never forwards again
    threads: list[threading.Thread] = field(default_factory=list)

    def close(self) -> None:
        for s in (self.client, self.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server((listen_host, 0))
        self.host, self.port = listen_host, self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._holed = False
        self._links: list[_Link] = []
        self._closed = threading.Event()
        self.dropped = 0  # bytes dropped while black-holed (both directions)
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def black_holed(self) -> bool:
        return self._holed

    def black_hole(self) -> None:
        with self._lock:
            self._holed = True
            for link in self._links:
                link.dead = True

    def restore(self) -> None:
        with self._lock:
            self._holed = False

    def open_links(self) -> int:
        with self._lock:
            return len(self._links)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a close alone does not)
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()
        self._acceptor.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- the work -----------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                holed = self._holed
                self.accepted += 1
            upstream = None
            if not holed:
                try:
                    upstream = socket.create_connection(self.target, timeout=10)
                    upstream.settimeout(None)
                except OSError:
                    client.close()  # the server itself is down: refused, as it would be
                    continue
            link = _Link(client, upstream, dead=holed)
            with self._lock:
                self._links.append(link)
            pumps = [(client, upstream)] + ([(upstream, client)] if upstream is not None else [])
            for src, dst in pumps:
                t = threading.Thread(target=self._pump, args=(link, src, dst), daemon=True, name="tcp-proxy-pump")
                link.threads.append(t)
                t.start()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if self._holed:
                        link.dead = True
                    dead = link.dead
                    if dead:
                        self.dropped += len(data)
                if not dead and dst is not None:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                if link in self._links:
                    self._links.remove(link)
            link.close()  # one end closed (or failed): so does the other, as TCP would
