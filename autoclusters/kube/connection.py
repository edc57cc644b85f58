"""A minimal HTTP/1.1 client for one API server: kept-alive TLS connections, nothing else.

The controller makes tens of thousands of small requests; through ``urllib3`` and
``http.client`` each one builds several objects and parses its response headers with the
``email`` package, which cost more CPU than the request's JSON. This client does only what
talking to a Kubernetes API server needs: a pool of kept-alive connections (TLS with a CA
bundle or without verification, an optional client certificate and server name),
``Content-Length`` and chunked bodies, a streamed body for watches, connect and read
timeouts. A kept-alive connection the server closed while idle is left before it is used;
if the close is seen only after the request was written, a GET is sent once more on a new
connection and any other request fails as Unavailable (the server may have read it), as
Go's client does. Proxies
and anything else go through the ``kubernetes`` library (:func:`autoclusters.kube.load_kube`).
"""

from __future__ import annotations

import contextlib
import io
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from autoclusters.kube.errors import Unavailable

_MAX_LINE = 65536
_MAX_HEADERS = 200


@dataclass
class TLS:
    ca_file: str | None = None
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None  # the name the certificate is checked against (default: the host)

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.verify:
            if self.ca_file:
                ctx.load_verify_locations(cafile=self.ca_file)
            else:
                ctx.load_default_certs()
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


class _SocketReader(io.RawIOBase):
    """The raw side of a connection's read buffer: the socket's reads (as ``socket.makefile``'s
    would be), and for a watch the gathering of a burst's events into one wake-up.

    A watch's events arrive one at a time, each in its own TLS record, and a thread woken for
    each pays the wake-up and a cold cache every time (about 0.3 ms of CPU per node event on a
    busy 2-CPU machine against 30 µs to decode it). With ``gather`` > 0, a read that would
    wait while events are coming close together (the last wait was shorter than ``gather``)
    first sleeps ``gather`` seconds, so the events that arrive meanwhile are read and handled
    in one go. A lone event is read as soon as it comes (after a long wait no sleep is added),
    and an event of a burst waits at most ``gather`` more."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.gather = 0.0
        self._last_wait = float("inf")  # how long the last read that found nothing waited

    def readable(self) -> bool:
        return True

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def readinto(self, buffer: Any) -> int:
        if not self.gather:
            return self._sock.recv_into(buffer)
        if self._ready():
            return self._sock.recv_into(buffer)
        if self._last_wait < self.gather:
            self._sleep(self.gather)
        started = time.monotonic()
        n = self._sock.recv_into(buffer)
        self._last_wait = time.monotonic() - started
        return n

    def _ready(self) -> bool:
        """Something to read already (decrypted and kept by TLS, or in the socket's buffer)."""
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0:
            return True
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        return bool(poller.poll(0))


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.timeout = sock.gettimeout()
        self.reader = _SocketReader(sock)
        self.file: BinaryIO = io.BufferedReader(self.reader, _MAX_LINE)

    def close(self) -> None:
        for c in (self.file, self.sock):
            with contextlib.suppress(OSError):
                c.close()

    def stale(self) -> bool:
        """A kept-alive connection the server closed (or wrote to unasked) is readable while idle."""
        poller = select.poll()  # not select(): a process may hold more than 1,024 descriptors
        try:
            poller.register(self.sock, select.POLLIN)
            readable = poller.poll(0)
        except (OSError, ValueError):
            return True
        return bool(readable) or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0)


@dataclass
class Response:
    status: int
    reason: str
    head: bytes = b""  # the answer's status line and header lines, as received (CRLF line ends)
    data: bytes = b""
    body: Body | None = None  # a streamed response's body (``stream=True``)

    @property
    def headers(self) -> dict[str, str]:
        """The header lines by name in lower case (repeated ones joined with ", "); parsed only
        when asked: the client itself reads only the three fields that frame the body."""
        headers: dict[str, str] = {}
        for line in self.head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep:
                key, value = name.strip().lower(), value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return headers


class _ServerClosed(Exception):
    """The server closed a kept-alive connection before answering. ``sent``: the request was
    written whole, so the server may have read it; only a request that reads nothing
    (GET, HEAD) is then sent again."""

    def __init__(self, sent: bool) -> None:
        super().__init__()
        self.sent = sent


_REPLAYABLE = frozenset({"GET", "HEAD"})
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class Server:
    """Requests to one server (``https://host:port`` or ``http://...``), from many threads."""

    def __init__(self, url: str, *, tls: TLS | None = None, pool_size: int = 8) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) server URL: {url}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")  # a proxy's path in front of the API's paths
        self.host_header = parts.netloc.rpartition("@")[2]
        self._host_line = f"Host: {self.host_header}\r\n".encode("latin-1")
        self.tls = tls or TLS()
        self._ctx: ssl.SSLContext | None = None  # made on the first connection (reads the CA bundle)
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._pool_size = pool_size

    # --- connections ------------------------------------------------------------------
    def _connect(self, timeout: float) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            try:
                if self._ctx is None:
                    self._ctx = self.tls.context()
                sock = self._ctx.wrap_socket(sock, server_hostname=self.tls.server_name or self.host)
            except BaseException:
                sock.close()
                raise
        return _Conn(sock)

    def _take(self) -> _Conn | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if not conn.stale():
                return conn
            conn.close()

    def _give_back(self, conn: _Conn) -> None:
        conn.reader.gather = 0.0  # a watch that ended whole: its connection serves requests again
        with self._lock:
            if len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- requests ---------------------------------------------------------------------
    def request(self, method: str, path: str, *, headers: Mapping[str, str] | bytes, body: bytes | None = None,
                connect_timeout: float = 30, read_timeout: float = 30, stream: bool = False) -> Response:
        """``headers``: a mapping, or header lines already encoded (``b"Name: value\\r\\n"`` each,
        :func:`header_lines`) for a caller that sends the same ones on every request."""
        lines = headers if isinstance(headers, bytes) else header_lines(headers)
        if body is not None or method in _WITH_BODY:
            lines += b"Content-Length: %d\r\n" % len(body or b"")
        # one buffer, one sendall: the request line, the headers and the body leave in one write
        wire = b"".join((f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1"), self._host_line, lines,
                         b"\r\n", body or b""))
        try:
            conn = self._take()
            if conn is not None:
                try:
                    return self._exchange(conn, wire, method, read_timeout, stream)
                except _ServerClosed as e:  # closed while idle, seen only now
                    if e.sent and method not in _REPLAYABLE:
                        raise Unavailable(f"{self.host}:{self.port} closed a kept-alive connection without "
                                          f"answering a {method}; it is not sent again") from e
            conn = self._connect(connect_timeout)
            try:
                return self._exchange(conn, wire, method, read_timeout, stream)
            except _ServerClosed as e:
                raise Unavailable(f"{self.host}:{self.port} closed the connection without an answer") from e
        except (OSError, ValueError) as e:  # ssl.SSLError and socket.timeout are OSErrors
            raise Unavailable(f"{type(e).__name__}: {e}") from e

    def _exchange(self, conn: _Conn, wire: bytes, method: str, read_timeout: float, stream: bool) -> Response:
        try:
            if conn.timeout != read_timeout:  # settimeout is a system call (the socket's blocking mode)
                conn.sock.settimeout(read_timeout)
                conn.timeout = read_timeout
            try:
                conn.sock.sendall(wire)
            except (BrokenPipeError, ConnectionResetError) as e:
                raise _ServerClosed(sent=False) from e
            try:
                head = _read_head(conn.file)
            except ConnectionResetError as e:
                raise _ServerClosed(sent=True) from e
            if not head:
                raise _ServerClosed(sent=True)
            status, reason, version, fields = _parse_head(head)
            while 100 <= status < 200:  # informational answers come before the real one
                head = _read_head(conn.file)
                status, reason, version, fields = _parse_head(head)
            keep = version == "HTTP/1.1" and b"close" not in _field(fields, b"connection")
            chunked = b"chunked" in _field(fields, b"transfer-encoding")
            length: int | None = None
            if method == "HEAD" or status in (204, 304):
                length = 0
            elif not chunked and (value := _field(fields, b"content-length")):
                length = int(value)
            if not stream and keep and length is not None:  # the common answer: read it here, in one call
                data = conn.file.read(length) if length else b""
                if len(data) < length:
                    raise Unavailable("the server ended an answer before its Content-Length")
                self._give_back(conn)
                return Response(status, reason, head, data=data)
            body = Body(conn, self, keep=keep, chunked=chunked, length=length)
            if stream:
                return Response(status, reason, head, body=body)
            return Response(status, reason, head, data=body.read_all())
        except BaseException:
            conn.close()
            raise


class Body:
    """A response body read from its connection; the connection goes back to the pool once the
    body has been read whole (and the server keeps it open), else it is closed."""

    def __init__(self, conn: _Conn, server: Server, *, keep: bool, chunked: bool, length: int | None) -> None:
        """``length``: the body's Content-Length (0: no body); None with ``chunked``, else the body
        is read to the end of the connection."""
        self._conn: _Conn | None = conn
        self._server = server
        self._keep = keep
        self._chunked = chunked and length is None
        self._length = length
        if self._length is None and not self._chunked:
            self._keep = False  # read to the end of the connection

    def read_all(self) -> bytes:
        return b"".join(self.stream())

    def gather(self, seconds: float) -> None:
        """A watch's body: the events of a burst are read together (:class:`_SocketReader`)."""
        if self._conn is not None:
            self._conn.reader.gather = seconds

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        """The body's pieces as they arrive (a watch: one or more events per chunk)."""
        conn = self._conn
        if conn is None:
            return
        f = conn.file
        done = False
        try:
            if self._chunked:
                while True:
                    line = f.readline(_MAX_LINE)
                    if not line:
                        raise Unavailable("the server ended a chunked answer early")
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while f.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        break
                    data = f.read(size)
                    if len(data) < size:
                        raise Unavailable("the server ended a chunk early")
                    f.read(2)
                    yield data
            elif self._length is not None:
                left = self._length
                while left > 0:
                    data = f.read(min(left, amt))
                    if not data:
                        raise Unavailable("the server ended an answer before its Content-Length")
                    left -= len(data)
                    yield data
            else:
                while data := f.read(amt):
                    yield data
            done = True
        finally:
            self._conn = None
            if done and self._keep:
                self._server._give_back(conn)
            else:
                conn.close()

    def release_conn(self) -> None:
        """Stops reading: the connection is closed (a watch's stream cannot be reused)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def header_lines(headers: Mapping[str, str]) -> bytes:
    """Header lines as sent: ``b"Name: value\\r\\n"`` each."""
    return "".join([f"{k}: {v}\r\n" for k, v in headers.items()]).encode("latin-1")


def _read_head(f: BinaryIO) -> bytes:
    """The answer's status line and header lines (each ending in CRLF, without the empty line
    after them); b"" when the server closed the connection. An answer's head usually arrives in
    one piece: it is then taken from the read buffer in one call, else line by line."""
    buf = f.peek(_MAX_LINE)  # type: ignore[attr-defined]  # BufferedReader: at most one read, nothing consumed
    end = buf.find(b"\r\n\r\n")
    if end >= 0 and buf.count(b"\n", 0, end) == buf.count(b"\r\n", 0, end):
        head = f.read(end + 4)
        return head[:-2]
    lines: list[bytes] = []
    for _ in range(_MAX_HEADERS + 1):
        line = f.readline(_MAX_LINE)
        if not line:
            if not lines:
                return b""
            raise Unavailable("the server ended an answer within its headers")
        if line in (b"\r\n", b"\n"):
            if not lines:
                raise Unavailable(f"not an HTTP answer: {line!r}")
            return b"".join(lines)
        lines.append(line.rstrip(b"\r\n") + b"\r\n")
    raise Unavailable(f"more than {_MAX_HEADERS} header lines in an answer")


def _parse_head(head: bytes) -> tuple[int, str, str, bytes]:
    """(status, reason, version, the header lines in lower case after a leading CRLF)."""
    eol = head.find(b"\r\n")
    if eol < 0:
        raise Unavailable(f"not an HTTP answer: {head[:80]!r}")
    status, reason, version = _status_line(head[:eol])
    return status, reason, version, head[eol:].lower()


def _field(fields: bytes, name: bytes) -> bytes:
    """A header's value from ``_parse_head``'s lower-case lines (repeats joined with ", "); b"" when absent."""
    values = []
    at = fields.find(b"\r\n" + name + b":")
    while at >= 0:
        start = at + len(name) + 3
        end = fields.find(b"\r\n", start)
        values.append(fields[start:end].strip())
        at = fields.find(b"\r\n" + name + b":", end)
    return b", ".join(values)


def _status_line(line: bytes) -> tuple[int, str, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise Unavailable(f"not an HTTP answer: {line[:80]!r}")
    try:
        status = int(parts[1])
    except ValueError as e:
        raise Unavailable(f"not an HTTP status: {line[:80]!r}") from e
    return status, parts[2] if len(parts) > 2 else "", parts[0]
