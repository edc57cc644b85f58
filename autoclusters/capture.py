"""Running an operator's program, or posting to an operator's URL and reading the answer, with
a bounded capture: at most
``limit`` bytes of each output stream are kept in memory (the last ones: where a failing
program says why), however much the program writes, and whether anything was dropped is
said. The pre-drain hook and the command provider both run their programs through ``run``.

A program that outlives its timeout is killed with its whole process group (it runs in a
session of its own), so a shell's children do not keep writing after it.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

_CHUNK = 65536
_AFTER_EXIT_SECONDS = 1.0  # how long the readers may drain pipes a leftover child still holds


@dataclass(frozen=True)
class Captured:
    returncode: int | None  # None: killed at the timeout
    stdout: bytes
    stderr: bytes
    dropped: bool  # some output was not kept (more than the limit)


class _Tail:
    """The last ``limit`` bytes read from a stream (read to its end, so the writer never blocks)."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.kept = bytearray()
        self.dropped = False
        self._stream, self._limit = stream, limit
        self.thread = threading.Thread(target=self._read, name="capture", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := self._stream.read(_CHUNK):
                self.kept += chunk
                if len(self.kept) > self._limit:
                    del self.kept[:len(self.kept) - self._limit]
                    self.dropped = True
        except (OSError, ValueError):
            pass  # the pipe was closed under us


def run(argv: Sequence[str], *, timeout: float, limit: int, stdin: bytes = b"",
        env: Mapping[str, str] | None = None) -> Captured:
    """Runs ``argv`` with ``stdin`` on its standard input; raises ``OSError`` when it cannot start."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(env) if env is not None else None, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = _Tail(proc.stdout, limit), _Tail(proc.stderr, limit)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin), name="capture-stdin", daemon=True)
    feeder.start()
    code: int | None
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code = None
    for reader in (out, err):
        reader.thread.join(_AFTER_EXIT_SECONDS)
    return Captured(code, bytes(out.kept), bytes(err.kept), out.dropped or err.dropped)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass  # the program exited without reading its input


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


def read_bounded(stream: Readable, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of an HTTP answer's body, and whether it had more (one byte more
    is read to tell; the rest is never read)."""
    data = stream.read(limit + 1)
    return data[:limit], len(data) > limit


def json_post(url: str, data: bytes) -> urllib.request.Request:
    """A JSON POST to ``url``; user information in it (``https://user:pass@host/...``) is sent as
    HTTP basic authentication, not as part of the host (which is what urllib would make of it;
    RFC 3986 section 3.2.1 deprecates the password there, and RFC 7617 defines the header).
    Raises ``ValueError`` for a port that is not a number."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Content-Type": "application/json"}
    if parts.username is not None:
        host = parts.hostname or ""
        port = parts.port
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
        user, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return urllib.request.Request(url, data=data, method="POST", headers=headers)
