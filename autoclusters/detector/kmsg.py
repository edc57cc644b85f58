"""Kernel log sources: the live ``/dev/kmsg`` device and a kernel log file.

Both emit only the driver fault lines the interpreter recognises (the journal, the third
kernel log source, is ``detector/journal.py``) and never conclude
recovery from silence (``Poll.snapshot`` is False). The file source serves simulated
nodes (one file per node in the spool) and journald exports; it follows the file by
byte offset and starts over when the file is replaced or truncated.
"""

from __future__ import annotations

import errno
import os

from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus

_READ_CHUNK = 1 << 16
_MAX_PENDING = 1 << 16  # a partial line longer than this is dropped, not buffered forever


class KernelLogFileSource:
    def __init__(self, path: str, interpreter: KernelLogInterpreter, *, name: str = "kmsg") -> None:
        self.path = path
        self.interpreter = interpreter
        self.name = name
        self._offset = 0
        self._inode: int | None = None
        self._partial = b""
        self._error: str | None = None

    def state(self) -> SourceState:
        """On unless the last poll could not read the file (a file not written yet is on: it is
        read from its first line once it is there)."""
        if self._error is not None:
            return SourceState(SourceStatus.UNAVAILABLE, self._error, expected=True)
        return SourceState(SourceStatus.ON, expected=True)

    def poll(self) -> Poll:
        result = self._poll()
        self._error = result.error
        return result

    def _poll(self) -> Poll:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return Poll(self.name)  # nothing logged yet
        except OSError as e:
            return Poll(self.name, error=f"cannot stat {self.path}: {e.strerror}")
        if st.st_ino != self._inode or st.st_size < self._offset:
            self._inode, self._offset, self._partial = st.st_ino, 0, b""
        if st.st_size == self._offset:
            return Poll(self.name)
        records: list[Record] = []
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                while True:
                    chunk = f.read(_READ_CHUNK)
                    if not chunk:
                        break
                    self._offset += len(chunk)
                    data = self._partial + chunk
                    lines = data.split(b"\n")
                    self._partial = lines.pop()
                    if len(self._partial) > _MAX_PENDING:
                        self._partial = b""
                    for raw in lines:
                        rec = self.interpreter.record(raw.decode("utf-8", "replace"))
                        if rec is not None:
                            records.append(rec)
        except OSError as e:
            return Poll(self.name, error=f"cannot read {self.path}: {e.strerror}")
        return Poll(self.name, tuple(records))


class DevKmsgSource:
    """Reads ``/dev/kmsg`` without blocking: every record since boot, then new ones."""

    def __init__(self, interpreter: KernelLogInterpreter, path: str = "/dev/kmsg", *, name: str = "kmsg") -> None:
        self.interpreter = interpreter
        self.path = path
        self.name = name
        self._fd: int | None = None

    def _opened(self) -> str | None:
        """Opens the device if it is not open; why not, if it cannot be opened."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                return f"cannot open {self.path}: {e.strerror}"
        return None

    def state(self) -> SourceState:
        """On while the device opens; unavailable (EPERM without privileges or CAP_SYSLOG, no
        mount) with the reason otherwise. The kernel log is always expected on a node."""
        why = self._opened()
        if why is not None:
            return SourceState(SourceStatus.UNAVAILABLE, why, expected=True)
        return SourceState(SourceStatus.ON, expected=True)

    def poll(self) -> Poll:
        why = self._opened()
        if why is not None:
            return Poll(self.name, error=why)
        assert self._fd is not None
        records: list[Record] = []
        while True:
            try:
                raw = os.read(self._fd, 8192)  # one record per read
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:
                    continue  # the ring buffer overwrote records we had not read; go on with the next
                self.close()
                return Poll(self.name, tuple(records), error=f"cannot read {self.path}: {e.strerror}")
            if not raw:
                break
            rec = self.interpreter.record(raw.decode("utf-8", "replace").split("\n", 1)[0])
            if rec is not None:
                records.append(rec)
        return Poll(self.name, tuple(records))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
