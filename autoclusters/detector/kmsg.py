"""Kernel log sources: the live ``/dev/kmsg`` device and a kernel log file.

Both emit only the driver fault lines the interpreter recognises and never conclude
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

    def state(self) -> SourceState:
        return SourceState(SourceStatus.ON)  # a file that cannot be read is a read error, not an absence

    def poll(self) -> Poll:
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

    def state(self) -> SourceState:
        return SourceState(SourceStatus.ON)  # a device that cannot be opened is a read error

    def poll(self) -> Poll:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                return Poll(self.name, error=f"cannot open {self.path}: {e.strerror}")
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
