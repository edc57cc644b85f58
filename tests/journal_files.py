"""Real journal files for tests: written by systemd's own ``systemd-journal-remote -o FILE.journal -``
from journal export format (``tools/install-journal-remote.sh``, a ``make test`` prerequisite)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from tests.conftest import tool_missing

BOOT = uuid.UUID(int=0x5EED).hex
OLD_BOOT = uuid.UUID(int=0x01D).hex
MACHINE = uuid.UUID(int=0xC0FFEE).hex
XID = "NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, name=python3, GPU has fallen off the bus."


def journal_remote() -> str:
    for cand in (shutil.which("systemd-journal-remote"), "/lib/systemd/systemd-journal-remote",
                 "/usr/lib/systemd/systemd-journal-remote"):
        if cand and os.access(cand, os.X_OK):
            return cand
    tool_missing("systemd-journal-remote (tools/install-journal-remote.sh)")


def entry(seq: int, message: str, *, transport: str = "kernel", boot: str = BOOT,
          facility: int | None = 0, identifier: str = "kernel") -> dict[str, str]:
    """One journal entry as journald writes a kernel message (journald-kmsg.c's fields)."""
    fields = {"__REALTIME_TIMESTAMP": str(1_764_600_000_000_000 + seq * 1_000_000),
              "__MONOTONIC_TIMESTAMP": str(seq * 1_000_000), "_BOOT_ID": boot, "_MACHINE_ID": MACHINE,
              "_HOSTNAME": "gpu-node-17", "_TRANSPORT": transport, "SYSLOG_IDENTIFIER": identifier,
              "PRIORITY": "3", "MESSAGE": message}
    if facility is not None:
        fields["SYSLOG_FACILITY"] = str(facility)
    return fields


def write_journal(path: Path, entries: list[dict[str, str]]) -> None:
    """A real journal file at ``path`` holding ``entries`` (journal export format on stdin)."""
    export = "".join("".join(f"{k}={v}\n" for k, v in e.items()) + "\n" for e in entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([journal_remote(), "-o", str(path), "-"], input=export.encode(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and path.exists(), done.stderr.decode()
