"""Starting, health-checking and stopping the local control plane's processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class StartError(RuntimeError):
    """A component did not come up; the message names it and shows its last log lines."""


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports. Every socket stays bound until all are
    picked: a port released at once may be handed out again by the very next bind, and two
    listeners of one process given the same port fail with "address already in use"."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Proc:
    name: str
    pid: int
    binary: str
    log: str
    argv: list[str] = field(default_factory=list)  # what started it (``spawn``), to start it again


def spawn(name: str, argv: list[str], logs: Path, cwd: Path, env: dict[str, str] | None = None) -> Proc:
    log_path = logs / f"{name}.log"
    with open(log_path, "ab") as log:
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=cwd, start_new_session=True, env=env)
    proc = Proc(name, p.pid, argv[0], str(log_path), list(argv))
    _wait_exec(proc, p)
    return proc


def _wait_exec(proc: Proc, popen: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Until the child has exec'd its binary, /proc shows the forking Python, and ``alive``
    would call a starting process dead (and ``down`` would then leave it running)."""
    deadline = time.monotonic() + timeout
    while not alive(proc) and popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def alive(proc: Proc) -> bool:
    """True while the recorded pid is still that binary (not a reused pid)."""
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return False
    comm, state = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    # Right after fork (or while exec runs) cmdline can be empty or still the parent's.
    return argv0 in ("", proc.binary) or comm == Path(proc.binary).name[:15]


def kill(proc: Proc, timeout: float = 10.0) -> None:
    """SIGKILL to the process's group (a crash: no shutdown of its own), then waits until it is
    gone: reaped, not only a zombie, whose other threads may still hold its sockets (a
    restart on the same port would find it in use)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while True:
        _reap(proc.pid)
        if not alive(proc) and not _zombie(proc.pid):
            return
        if time.monotonic() > deadline:
            raise StartError(f"{proc.name} (pid {proc.pid}) still runs {timeout:.0f}s after SIGKILL")
        time.sleep(0.05)


def stop(proc: Proc, grace: float = 10.0) -> None:
    if not alive(proc):
        _reap(proc.pid)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(proc.pid)
        if not alive(proc):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for _ in range(50):
        _reap(proc.pid)
        if not alive(proc):
            return
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    """The pid is a process that exited and is not reaped yet (or whose threads still exit)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def http_ok(url: str, *, context: ssl.SSLContext | None = None, expect: bytes | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as r:
            body = r.read()
            return r.status == 200 and (expect is None or expect in body)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def wait_healthy(proc: Proc, check: Callable[[], bool], timeout: float, progress: Callable[[str], None]) -> float:
    """Polls ``check`` until it passes; fails fast, naming the component, if the process dies."""
    start = time.monotonic()
    last_note = start
    while True:
        if check():
            return time.monotonic() - start
        if not alive(proc):
            time.sleep(0.2)  # just spawned, the pid may not show the binary yet: look once more
        if not alive(proc):
            raise StartError(f"{proc.name} exited during start-up. Last lines of {proc.log}:\n{tail(proc.log)}")
        now = time.monotonic()
        if now - start > timeout:
            raise StartError(f"{proc.name} did not become healthy within {timeout:.0f}s. "
                             f"Last lines of {proc.log}:\n{tail(proc.log)}")
        if now - last_note > 10:
            progress(f"  still waiting for {proc.name} ({now - start:.0f}s)")
            last_note = now
        time.sleep(0.2)
