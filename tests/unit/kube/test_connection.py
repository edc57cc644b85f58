"""The client's own HTTP/1.1 connections, against a scripted local server (plain and TLS):
kept-alive reuse, Content-Length and chunked bodies, a streamed watch, a server that closed
an idle connection, TLS with a CA, a server name and a client certificate.

The scripted server is below the client, not a fake of it: these tests are of the transport
(bytes on a socket), which the fake API server (tests/unit/fakeapi.py) sits above."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from autoclusters import certificates as certs
from autoclusters.kube import Unavailable
from autoclusters.kube.connection import TLS, Server, _Conn, _SocketReader

Answer = Callable[[bytes], list[bytes]]  # the request's bytes -> what to send back, piece by piece


class Scripted:
    """Accepts connections and answers each request with ``answer``; records requests per connection."""

    def __init__(self, answer: Answer, *, tls: ssl.SSLContext | None = None, close_after: int = 0,
                 hang_up: Callable[[int, int], bool] = lambda conn, req: False) -> None:
        self.answer = answer
        self.tls = tls
        self.close_after = close_after  # close each connection after this many answers (0: never)
        self.hang_up = hang_up  # (connection index, request index on it) -> close without answering
        self.closed = threading.Event()  # set when this server closes a connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[list[bytes]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True)
            except (ssl.SSLError, OSError):
                sock.close()
                return
        seen: list[bytes] = []
        index = len(self.connections)
        self.connections.append(seen)
        f = sock.makefile("rb")
        try:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = f.readline()
                    if not line:
                        return
                    head += line
                length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                               if h.lower().startswith(b"content-length:")), 0)
                request = head + f.read(length)
                seen.append(request)
                if self.hang_up(index, len(seen) - 1):
                    return
                for piece in self.answer(request):
                    sock.sendall(piece)
                if self.close_after and len(seen) >= self.close_after:
                    return
        except OSError:
            return
        finally:
            f.close()
            sock.close()
            self.closed.set()

    def close(self) -> None:
        self.listener.close()


def ok(body: bytes, extra: str = "") -> list[bytes]:
    return [f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body]


def chunked(*pieces: bytes) -> list[bytes]:
    out = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    out += [f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces]
    return [*out, b"0\r\n\r\n"]


@contextmanager
def serving(answer: Answer, **kw: object) -> Iterator[Scripted]:
    server = Scripted(answer, **kw)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.close()


def test_requests_reuse_one_kept_alive_connection_and_send_what_they_are_given() -> None:
    with serving(lambda req: ok(b'{"n": 1}')) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}/prefix")
        for _ in range(3):
            resp = api.request("PATCH", "/api/v1/nodes/a?x=1", headers={"Content-Type": "application/json"},
                               body=b'{"a":1}')
            assert (resp.status, resp.data) == (200, b'{"n": 1}')
        assert len(srv.connections) == 1 and len(srv.connections[0]) == 3
        first = srv.connections[0][0]
        assert first.startswith(b"PATCH /prefix/api/v1/nodes/a?x=1 HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{srv.port}".encode() in first and b"Content-Length: 7" in first
        assert first.endswith(b'\r\n\r\n{"a":1}')


def test_a_chunked_answer_is_joined_and_a_streamed_one_arrives_piece_by_piece() -> None:
    with serving(lambda req: chunked(b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n')) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        assert api.request("GET", "/a", headers={}).data == b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n'
        resp = api.request("GET", "/a?watch=true", headers={}, stream=True)
        assert resp.body is not None
        assert list(resp.body.stream()) == [b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n']
        assert len(srv.connections) == 1  # both bodies read whole: the connection was kept


def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_once() -> None:
    with serving(lambda req: ok(b"{}"), close_after=1) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        for _ in range(3):
            assert api.request("POST", "/x", headers={}, body=b"{}").status == 200
            assert srv.closed.wait(5)  # the server has closed that connection: it is idle in our pool
            srv.closed.clear()
        assert [len(c) for c in srv.connections] == [1, 1, 1]  # each request exactly once


@pytest.mark.parametrize("method, repeated", [("GET", True), ("PATCH", False)])
def test_a_close_seen_only_after_sending_repeats_a_get_but_never_a_write(method: str, repeated: bool) -> None:
    with serving(lambda req: ok(b"{}"), hang_up=lambda conn, req: (conn, req) == (0, 1)) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        assert api.request("GET", "/a", headers={}).status == 200
        if repeated:
            assert api.request(method, "/b", headers={}).status == 200
        else:
            with pytest.raises(Unavailable, match="not sent again"):
                api.request(method, "/b", headers={}, body=b"{}")
        sent = [[r.split(b" ")[1] for r in c] for c in srv.connections]
        assert sent == ([[b"/a", b"/b"], [b"/b"]] if repeated else [[b"/a", b"/b"]])


def test_connection_close_and_an_error_status_keep_their_body() -> None:
    answer = [b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 9\r\n\r\n{\"a\": 1}\n"]
    with serving(lambda req: answer) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        resp = api.request("GET", "/missing", headers={})
        assert (resp.status, resp.reason, resp.data) == (404, "Not Found", b'{"a": 1}\n')
        assert api._idle == []  # "Connection: close" is honoured


def test_nobody_listening_and_a_silent_server_are_unavailable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(Unavailable):
        Server(f"http://127.0.0.1:{port}").request("GET", "/", headers={}, connect_timeout=2)
    with serving(lambda req: []) as srv, pytest.raises(Unavailable):
        Server(f"http://127.0.0.1:{srv.port}").request("GET", "/", headers={}, read_timeout=0.3)


def test_tls_checks_the_server_name_and_presents_the_client_certificate(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca = certs.make_ca("test-ca", now, dt.timedelta(hours=1))
    serving_pair = certs.make_serving(ca, ["api.internal"], now, dt.timedelta(hours=1))
    client = certs.make_leaf(ca, certs.name("admin"), now, dt.timedelta(hours=1), usage=certs.CLIENT_AUTH)
    for name, data in {"ca.crt": ca.cert_pem, "srv.crt": serving_pair.cert_pem, "srv.key": serving_pair.key_pem,
                       "cl.crt": client.cert_pem, "cl.key": client.key_pem}.items():
        (tmp_path / name).write_bytes(data)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    ctx.load_verify_locations(tmp_path / "ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED  # the client must present a certificate of the CA
    with serving(lambda req: ok(b"{}"), tls=ctx) as srv:
        url = f"https://127.0.0.1:{srv.port}"
        good = TLS(ca_file=str(tmp_path / "ca.crt"), cert_file=str(tmp_path / "cl.crt"),
                   key_file=str(tmp_path / "cl.key"), server_name="api.internal")
        assert Server(url, tls=good).request("GET", "/", headers={}).status == 200
        with pytest.raises(Unavailable, match=r"(?i)certificate|hostname|match"):  # 127.0.0.1 is not in the cert
            Server(url, tls=TLS(ca_file=str(tmp_path / "ca.crt"), cert_file=str(tmp_path / "cl.crt"),
                                key_file=str(tmp_path / "cl.key"))).request("GET", "/", headers={})
        with pytest.raises(Unavailable):  # no client certificate: the server refuses the handshake
            Server(url, tls=TLS(ca_file=str(tmp_path / "ca.crt"), server_name="api.internal")).request(
                "GET", "/", headers={}, read_timeout=5)
        insecure = TLS(verify=False, cert_file=str(tmp_path / "cl.crt"), key_file=str(tmp_path / "cl.key"))
        assert Server(url, tls=insecure).request("GET", "/", headers={}).status == 200


def test_connections_are_kept_alive_in_a_process_with_more_than_1024_descriptors() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(hard, 4096) < 1200:
        pytest.skip(f"the descriptor limit ({hard}) is below 1,200 here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    filler = [socket.socket() for _ in range(1100)]  # the connections get descriptors above 1,024
    try:
        with serving(lambda req: ok(b"{}")) as srv:
            api = Server(f"http://127.0.0.1:{srv.port}")
            for _ in range(3):
                assert api.request("GET", "/", headers={}).status == 200
            assert len(srv.connections) == 1
    finally:
        for s in filler:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_kube_streams_any_get_it_is_asked_to_not_only_a_watch(tmp_path: Path) -> None:
    import yaml

    from autoclusters.kube.light import load_light_kube

    with serving(lambda req: chunked(b"# HELP a\n", b"a 1\n")) as srv:
        kubeconfig = tmp_path / "kc"
        kubeconfig.write_text(yaml.safe_dump({
            "current-context": "c", "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{srv.port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
        kube = load_light_kube(str(kubeconfig))
        body = kube.request("GET", "/metrics", stream=True)
        assert b"".join(body.stream()) == b"# HELP a\na 1\n"
        assert srv.connections[0][0].startswith(b"GET /metrics HTTP/1.1\r\n")


def test_an_answer_head_split_across_reads_or_with_bare_newlines_is_read_line_by_line() -> None:
    """The head is taken from the read buffer in one call when it arrived whole; a head that
    arrives in pieces, or ends its lines in a bare LF, is read line by line, to the same answer."""
    def split(req: bytes) -> Iterator[bytes]:
        for piece in (b"HTTP/1.1 200 OK\r\nContent-Ty", b"pe: application/json\r\nContent-Len", b"gth: 8\r\n",
                      b"\r\n", b'{"a": 1}'):
            yield piece
            time.sleep(0.05)  # each piece its own read on the client's side

    def bare(req: bytes) -> list[bytes]:
        return [b"HTTP/1.1 201 Created\nContent-Length: 2\nX-Multi: a\nX-Multi: b\n\n{}"]

    for answer, status, data in ((split, 200, b'{"a": 1}'), (bare, 201, b"{}")):
        with serving(answer) as srv:  # type: ignore[arg-type]
            api = Server(f"http://127.0.0.1:{srv.port}")
            for _ in range(2):
                resp = api.request("GET", "/", headers={})
                assert (resp.status, resp.data) == (status, data)
            assert len(srv.connections) == 1  # each body read to its end: the connection was kept
    assert resp.headers == {"content-length": "2", "x-multi": "a, b"}


def test_answers_without_a_body_keep_the_connection_and_a_body_is_read_off_the_socket() -> None:
    """204, HEAD (with the Content-Length a GET would have) and an empty 200: nothing is read
    past the head, so the next answer on the kept-alive connection is read intact."""
    answers = {b"DELETE": [b"HTTP/1.1 204 No Content\r\n\r\n"],
               b"HEAD": [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"],
               b"PATCH": [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"],
               b"GET": ok(b'{"after": true}')}
    with serving(lambda req: answers[req.split(b" ", 1)[0]]) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        for method in ("DELETE", "GET", "HEAD", "GET", "PATCH", "GET"):
            resp = api.request(method, "/x", headers={})
            assert resp.data == (b'{"after": true}' if method == "GET" else b"")
        assert len(srv.connections) == 1 and len(srv.connections[0]) == 6


def test_encoded_header_lines_are_sent_as_given_with_the_length_of_the_body() -> None:
    with serving(lambda req: ok(b"{}")) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        api.request("POST", "/e", headers=b"Accept: application/json\r\nAuthorization: Bearer t\r\n", body=b"{}")
        api.request("POST", "/e", headers={"Accept": "application/json"})
        first, second = srv.connections[0]
        assert first == (f"POST /e HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAccept: application/json\r\n"
                         "Authorization: Bearer t\r\nContent-Length: 2\r\n\r\n{}").encode()
        assert second.endswith(b"Accept: application/json\r\nContent-Length: 0\r\n\r\n")


def test_a_server_that_ends_within_the_head_or_sends_no_status_is_unavailable() -> None:
    for answer in ([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"], [b"\r\n\r\n"], [b"SSH-2.0-x\r\n\r\n"]):
        with serving(lambda req, a=answer: a, close_after=1) as srv, pytest.raises(Unavailable):  # type: ignore[misc]
            Server(f"http://127.0.0.1:{srv.port}").request("POST", "/", headers={}, body=b"{}", read_timeout=5)


def test_each_request_on_a_kept_alive_connection_reads_under_its_own_timeout() -> None:
    """The socket's timeout is set only when it changes (a system call); a request with a
    shorter read timeout than the one before still gives up after its own."""
    with serving(lambda req: ok(b"{}") if req.startswith(b"GET /fast") else []) as srv:
        api = Server(f"http://127.0.0.1:{srv.port}")
        assert api.request("GET", "/fast", headers={}, read_timeout=30).status == 200
        assert api.request("GET", "/fast", headers={}, read_timeout=30).status == 200
        started = time.monotonic()
        with pytest.raises(Unavailable):
            api.request("POST", "/silent", headers={}, body=b"{}", read_timeout=0.3)
        assert time.monotonic() - started < 5
        assert len(srv.connections) == 1  # the first connection, kept alive, carried all three



# --- a watch's burst read together (_SocketReader.gather) ------------------------------------
@contextmanager
def reader_pair(gather: float) -> Iterator[tuple[_SocketReader, socket.socket, list[float]]]:
    """A gathering reader on one end of a socket pair, the other end to write to, and the
    sleeps the reader asked for (each writes nothing by itself)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    reader = _SocketReader(ours)
    reader.gather = gather
    slept: list[float] = []
    reader._sleep = slept.append  # type: ignore[method-assign,assignment]
    try:
        yield reader, theirs, slept
    finally:
        ours.close()
        theirs.close()


def read(reader: _SocketReader) -> bytes:
    buf = bytearray(1024)
    return bytes(buf[:reader.readinto(buf)])


class _EnteredRecv:
    """The reader's socket, telling when a read has reached the blocking ``recv_into``: a writer
    that waits for it knows the reader is waiting (a timer alone races a descheduled reader)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.entered = threading.Event()

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv_into(self, buffer: Any) -> int:
        self.entered.set()
        return self._sock.recv_into(buffer)


def test_a_burst_is_read_together_after_one_sleep_and_a_lone_event_at_once() -> None:
    with reader_pair(0.05) as (reader, theirs, slept):
        # nothing waited yet: a read that finds nothing waits for the next event without a sleep
        sock = reader._sock
        watched = _EnteredRecv(sock)
        reader._sock = watched  # type: ignore[assignment]

        def send_once_waiting() -> None:
            assert watched.entered.wait(5)
            time.sleep(0.05)
            theirs.sendall(b"e1")

        threading.Thread(target=send_once_waiting, daemon=True).start()
        assert read(reader) == b"e1" and slept == []
        reader._sock = sock
        assert reader._last_wait >= 0.04  # a long wait: not a burst
        # what is there already is read at once
        theirs.sendall(b"e2")
        assert read(reader) == b"e2" and slept == []
        # events coming close together (the last wait was short): the next read sleeps first,
        # and what came meanwhile is one read
        reader._last_wait = 0.001

        def arrive(seconds: float) -> None:
            slept.append(seconds)
            theirs.sendall(b"e3")
            theirs.sendall(b"e4")

        reader._sleep = arrive  # type: ignore[method-assign]
        assert read(reader) == b"e3e4" and slept == [0.05]


def test_without_gather_every_read_goes_straight_to_the_socket() -> None:
    with reader_pair(0.0) as (reader, theirs, slept):
        reader._last_wait = 0.001
        theirs.sendall(b"e1")
        assert read(reader) == b"e1"
        threading.Timer(0.02, theirs.sendall, (b"e2",)).start()
        assert read(reader) == b"e2" and slept == []


def test_a_connection_given_back_after_a_watch_reads_without_gathering() -> None:
    server = Server("http://127.0.0.1:1")
    ours, theirs = socket.socketpair()
    try:
        conn = _Conn(ours)
        conn.reader.gather = 0.02
        server._give_back(conn)
        assert conn.reader.gather == 0.0
    finally:
        server.close()
        theirs.close()


def test_a_read_timeout_still_surfaces_while_a_burst_is_gathered() -> None:
    """The sleep before a read that would wait never hides the socket's read timeout: a watch
    whose server went silent mid-burst ends with the timeout, as a read straight off the socket
    does, after at most ``gather`` more."""
    with reader_pair(0.05) as (reader, _theirs, slept):
        reader._sock.settimeout(0.2)
        reader._last_wait = 0.001  # in a burst: the read sleeps first
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            read(reader)
        assert slept == [0.05] and time.monotonic() - started < 5


def test_what_tls_already_decrypted_is_read_without_a_sleep(tmp_path: Path) -> None:
    """A TLS record is decrypted whole: what the last read left of it is kept by TLS, not in the
    socket (``SSLSocket.pending``), and is read at once even in a burst, never after a sleep."""
    now = dt.datetime.now(dt.UTC)
    ca = certs.make_ca("test-ca", now, dt.timedelta(hours=1))
    pair = certs.make_serving(ca, ["api.internal"], now, dt.timedelta(hours=1))
    (tmp_path / "srv.crt").write_bytes(pair.cert_pem)
    (tmp_path / "srv.key").write_bytes(pair.key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    theirs.settimeout(5)
    served: list[ssl.SSLSocket] = []
    t = threading.Thread(target=lambda: served.append(server_ctx.wrap_socket(theirs, server_side=True)))
    t.start()
    client = TLS(verify=False).context().wrap_socket(ours, server_hostname="api.internal")
    t.join(5)
    try:
        served[0].sendall(b"x" * 1000)  # one record
        reader = _SocketReader(client)
        reader.gather = 0.05
        slept: list[float] = []
        reader._sleep = slept.append  # type: ignore[method-assign,assignment]
        first = bytearray(10)
        assert reader.readinto(first) == 10 and client.pending() == 990
        reader._last_wait = 0.001  # in a burst
        rest = bytearray(2000)
        assert reader.readinto(rest) == 990 and slept == []
    finally:
        client.close()
        for s in served:
            s.close()
