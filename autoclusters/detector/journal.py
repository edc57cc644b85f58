"""The kernel log through the host's systemd journal, for nodes whose ``/dev/kmsg`` a container cannot read.

It reads with libsystemd's public ``sd_journal_*`` API over ctypes (``libsystemd.so.0``,
which the Debian base image carries as a dependency of apt; see sd-journal(3)): no
``journalctl`` in the image, no process per poll. Only entries of the kernel's transport
(``_TRANSPORT=kernel``: what journald read from ``/dev/kmsg``) of the current boot
(``_BOOT_ID``, the host's, which a container shares) are read, so a ``logger -t kernel`` line
(``_TRANSPORT=syslog``) never counts; an entry journald took from ``/dev/kmsg`` with a
facility other than the kernel's (``SYSLOG_FACILITY`` not 0: a write from user space) counts
only as a fault drill, as in the ``/dev/kmsg`` source.

The journal is opened as an OS root (``SD_JOURNAL_OS_ROOT``): ``ROOT/var/log/journal`` and
``ROOT/run/log/journal`` with their machine-id directories, active and archived files.
The handle stays open between polls and keeps its place; journald's rotation (a new file,
the old one renamed) reaches it through its inotify watch (``sd_journal_get_fd`` once,
``sd_journal_process`` each poll); a journal directory that appears later (``/var/log/journal``
made for persistent storage) cannot be watched before it exists, so the handle is opened
again then. Whenever the handle is opened again, reading resumes after the cursor of the
last entry read. Like every log source it reports only new lines:
silence never means recovery.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoclusters.detector.kernel_log import KernelLogInterpreter, parse_line
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus

LIBRARY = "libsystemd.so.0"
SD_JOURNAL_OS_ROOT = 1 << 4  # sd-journal.h
JOURNAL_DIRS = ("var/log/journal", "run/log/journal")
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_MAX_ENTRIES_PER_POLL = 100_000  # the rest waits for the next poll (the handle keeps its place)


class JournalUnavailable(Exception):
    """libsystemd cannot be loaded, or the journal cannot be opened or read."""


def current_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id as the journal writes it (32 hex digits, no dashes)."""
    return Path(path).read_text().strip().replace("-", "")


def _load(name: str) -> Any:
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise JournalUnavailable(f"cannot load {name}: {e}") from None
    vp, cp, i, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    signatures: dict[str, tuple[list[Any], Any]] = {
        "sd_journal_open_directory": ([ctypes.POINTER(vp), cp, i], i),
        "sd_journal_close": ([vp], None),
        "sd_journal_add_match": ([vp, ctypes.c_void_p, sz], i),
        "sd_journal_seek_head": ([vp], i),
        "sd_journal_seek_cursor": ([vp, cp], i),
        "sd_journal_test_cursor": ([vp, cp], i),
        "sd_journal_next": ([vp], i),
        "sd_journal_get_data": ([vp, cp, ctypes.POINTER(vp), ctypes.POINTER(sz)], i),
        "sd_journal_get_cursor": ([vp, ctypes.POINTER(vp)], i),
        "sd_journal_get_fd": ([vp], i),
        "sd_journal_process": ([vp], i),
        "sd_journal_get_usage": ([vp, ctypes.POINTER(ctypes.c_uint64)], i),
    }
    for fn, (args, res) in signatures.items():
        try:
            f = getattr(lib, fn)
        except AttributeError:
            raise JournalUnavailable(f"{name} has no {fn}") from None
        f.argtypes, f.restype = args, res
    return lib


def _check(r: int, what: str) -> int:
    if r < 0:
        raise JournalUnavailable(f"{what}: {os.strerror(-r)}")
    return r


class _Journal:
    """One open ``sd_journal`` handle, filtered to one boot's kernel entries."""

    def __init__(self, lib: Any, free: Callable[[Any], None], root: str, boot_id: str) -> None:
        self._lib, self._free = lib, free
        handle = ctypes.c_void_p()
        _check(lib.sd_journal_open_directory(ctypes.byref(handle), root.encode(), SD_JOURNAL_OS_ROOT),
               f"cannot open the journal under {root}")
        self._j = handle
        try:
            # Matches on different fields are ANDed (sd_journal_add_match(3)).
            for match in (b"_TRANSPORT=kernel", b"_BOOT_ID=" + boot_id.encode()):
                _check(lib.sd_journal_add_match(self._j, match, len(match)), "cannot filter the journal")
            _check(lib.sd_journal_get_fd(self._j), "cannot watch the journal for new files")
        except JournalUnavailable:
            self.close()
            raise

    def usage(self) -> int:
        """Bytes of the journal files this handle could open (0: none readable)."""
        n = ctypes.c_uint64()
        _check(self._lib.sd_journal_get_usage(self._j, ctypes.byref(n)), "cannot read the journal's usage")
        return n.value

    def seek(self, cursor: str | None) -> None:
        """To the boot's first entry, or to just after ``cursor``."""
        if cursor is None:
            _check(self._lib.sd_journal_seek_head(self._j), "cannot seek the journal")
            return
        _check(self._lib.sd_journal_seek_cursor(self._j, cursor.encode()), "cannot seek the journal")
        if _check(self._lib.sd_journal_next(self._j), "cannot read the journal") and \
                self._lib.sd_journal_test_cursor(self._j, cursor.encode()) <= 0:
            # the entry of the cursor is gone (vacuumed): this one is new, read it again next
            _check(self._lib.sd_journal_seek_cursor(self._j, cursor.encode()), "cannot seek the journal")

    def process(self) -> None:
        """Takes in what changed since the last call: new entries, rotated and new files."""
        _check(self._lib.sd_journal_process(self._j), "cannot follow the journal")

    def next(self) -> bool:
        return _check(self._lib.sd_journal_next(self._j), "cannot read the journal") > 0

    def field(self, name: bytes) -> bytes | None:
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        r = self._lib.sd_journal_get_data(self._j, name, ctypes.byref(data), ctypes.byref(size))
        if r < 0 or not data.value:
            return None  # -ENOENT: the entry has no such field
        return ctypes.string_at(data.value, size.value)[len(name) + 1:]

    def cursor(self) -> str:
        out = ctypes.c_void_p()
        _check(self._lib.sd_journal_get_cursor(self._j, ctypes.byref(out)), "cannot read the journal's cursor")
        if not out.value:
            raise JournalUnavailable("the journal gave no cursor")
        try:
            return ctypes.string_at(out.value).decode()
        finally:
            self._free(out)

    def close(self) -> None:
        if self._j:
            self._lib.sd_journal_close(self._j)
            self._j = ctypes.c_void_p()


class JournalSource:
    """Driver fault lines from the kernel's entries of the current boot in the host's journal."""

    def __init__(self, interpreter: KernelLogInterpreter, root: str = "/", *, name: str = "journal",
                 boot_id: str | None = None, library: str = LIBRARY) -> None:
        self.interpreter = interpreter
        self.root = root
        self.name = name
        self.library = library
        self._boot_id = boot_id
        self._lib: Any = None
        self._free: Callable[[Any], None] | None = None
        self._journal: _Journal | None = None
        self._cursor: str | None = None
        self._error: str | None = None
        self._dirs: tuple[bool, ...] = ()  # which journal directories there were when opened

    def _present(self) -> tuple[bool, ...]:
        return tuple(os.path.isdir(os.path.join(self.root, d)) for d in JOURNAL_DIRS)

    def _open(self) -> _Journal:
        if self._lib is None:
            self._lib = _load(self.library)
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
            self._free = libc.free
        if self._boot_id is None:
            try:
                self._boot_id = current_boot_id()
            except OSError as e:
                raise JournalUnavailable(f"cannot read this boot's id ({BOOT_ID_PATH}): {e.strerror}") from None
        assert self._free is not None
        self._dirs = self._present()
        journal = _Journal(self._lib, self._free, self.root, self._boot_id)
        try:
            journal.seek(self._cursor)
        except JournalUnavailable:
            journal.close()
            raise
        return journal

    def poll(self) -> Poll:
        records: list[Record] = []
        try:
            if self._journal is not None and self._present() != self._dirs:
                self.close()  # a journal directory came or went, which no watch sees: open again, resume
            if self._journal is None:
                self._journal = self._open()
            else:
                self._journal.process()
            journal = self._journal
            for _ in range(_MAX_ENTRIES_PER_POLL):
                if not journal.next():
                    break
                self._cursor = journal.cursor()
                rec = self._record(journal)
                if rec is not None:
                    records.append(rec)
        except JournalUnavailable as e:
            self.close()
            self._error = str(e)
            return Poll(self.name, tuple(records), error=self._error)
        self._error = None
        return Poll(self.name, tuple(records))

    def _record(self, journal: _Journal) -> Record | None:
        message = journal.field(b"MESSAGE")
        if message is None or b"Xid (" not in message:
            return None
        parsed = parse_line(message.decode("utf-8", "replace"))
        if parsed is None:
            return None
        facility = journal.field(b"SYSLOG_FACILITY")
        from_kernel = parsed.from_kernel and facility in (None, b"0")
        if not from_kernel and not self.interpreter.accept_user_lines:
            return None
        return self.interpreter.to_record(parsed)

    def state(self) -> SourceState:
        """On while the journal reads; unavailable, and why, when it does not (the kernel log is
        always expected: a node without it is blind to Xid faults)."""
        dirs = [os.path.join(self.root, d) for d in JOURNAL_DIRS]
        if self._error is None and self._journal is None:
            try:
                self._journal = self._open()
            except JournalUnavailable as e:
                self._error = str(e)
        if self._error is not None:
            return SourceState(SourceStatus.UNAVAILABLE, self._error, expected=True)
        assert self._journal is not None
        try:
            readable = self._journal.usage() > 0
        except JournalUnavailable as e:
            return SourceState(SourceStatus.UNAVAILABLE, str(e), expected=True)
        if not readable:
            why = "no journal files" if not any(_has_journal_files(d) for d in dirs) else \
                "no journal file libsystemd can read (a newer journal format, or no permission)"
            return SourceState(SourceStatus.UNAVAILABLE, f"{why} in {' or '.join(dirs)}", expected=True)
        return SourceState(SourceStatus.ON, expected=True)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def _has_journal_files(directory: str) -> bool:
    """Any ``*.journal`` in the directory or its machine-id directories."""
    try:
        for entry in os.scandir(directory):
            if entry.name.endswith((".journal", ".journal~")):
                return True
            if entry.is_dir() and any(n.endswith((".journal", ".journal~")) for n in os.listdir(entry.path)):
                return True
    except OSError:
        return False
    return False
