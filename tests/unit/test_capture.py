"""A bounded capture of a real program's output (``autoclusters.capture``)."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

from autoclusters import capture


def test_only_the_last_bytes_of_a_flood_are_kept_and_the_drop_is_said() -> None:
    # 4 MiB on each stream, far past a pipe's buffer: the program is never blocked by a full pipe
    script = ("import sys; sys.stdout.write('o' * (4 << 20) + 'END-OUT'); "
              "sys.stderr.write('e' * (4 << 20) + 'END-ERR'); sys.exit(3)")
    got = capture.run([sys.executable, "-c", script], timeout=30, limit=100)
    assert got.returncode == 3 and got.dropped
    assert len(got.stdout) == 100 and got.stdout.endswith(b"END-OUT")
    assert len(got.stderr) == 100 and got.stderr.endswith(b"END-ERR")


def test_input_and_environment_reach_the_program_and_small_output_is_whole() -> None:
    script = "import os, sys; print(sys.stdin.read() + os.environ['X'])"
    got = capture.run([sys.executable, "-c", script], timeout=30, limit=100, stdin=b"in-", env={**os.environ, "X": "x"})
    assert (got.returncode, got.stdout, got.dropped) == (0, b"in-x\n", False)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie no longer runs


def test_a_program_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    started = time.monotonic()
    got = capture.run([sys.executable, "-c", script], timeout=1, limit=100)
    assert got.returncode is None and time.monotonic() - started < 10
    child = int(pid_file.read_text())
    end = time.monotonic() + 5
    while not _gone(child):  # SIGKILL is delivered at once; its reaping may take a moment
        assert time.monotonic() < end, f"the hook's child {child} outlived the hook"
        time.sleep(0.01)


def test_an_http_body_is_read_only_up_to_the_limit() -> None:
    body = io.BytesIO(b"a" * 1000)
    assert capture.read_bounded(body, 10) == (b"a" * 10, True)
    assert body.tell() == 11  # one byte more to tell; the rest was never read
    assert capture.read_bounded(io.BytesIO(b"short"), 10) == (b"short", False)
