"""The journald kernel log source against real journal files.

The files are written by systemd's own ``systemd-journal-remote -o FILE.journal -`` from
journal export format (``tools/install-journal-remote.sh``, a ``make test`` prerequisite),
and read back through libsystemd, as on a node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.detector.journal import JournalSource, current_boot_id
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import SourceStatus
from autoclusters.faults.catalog import load_catalog
from tests.journal_files import BOOT, MACHINE, OLD_BOOT, XID, entry, journal_remote, write_journal


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    journal_remote()
    yield tmp_path / "host"


def source(root: Path, *, drills: bool = False) -> JournalSource:
    interp = KernelLogInterpreter(load_catalog(), GpuIndex({"0000:3b:00": 3}), source="journal",
                                  accept_user_lines=drills)
    return JournalSource(interp, str(root), boot_id=BOOT)


def codes(src: JournalSource) -> list[str]:
    poll = src.poll()
    assert poll.ok, poll.error
    assert not poll.snapshot  # a log: silence never means recovery
    return [r.code for r in poll.records]


def persistent(root: Path, name: str = "system.journal") -> Path:
    return root / "var/log/journal" / MACHINE / name


def test_only_the_kernels_entries_of_this_boot_count(root: Path) -> None:
    write_journal(persistent(root), [
        entry(1, XID.format(code=48), boot=OLD_BOOT),  # the previous boot's fault: repaired since
        entry(2, "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode."),
        entry(3, XID.format(code=79)),
        # `logger -p kern.err -t kernel ...`: a user-space line dressed as the kernel's, even its facility
        entry(4, XID.format(code=13), transport="syslog", facility=0),
        # a write to /dev/kmsg from user space: journald keeps its facility (user, 1)
        entry(5, XID.format(code=31), facility=1, identifier="inject"),
        entry(6, "nvidia-nvswitch2: SXid (PCI:0000:c6:00.0): 24007, Fatal, Link 44 SOE"),
    ])
    src = source(root)
    poll = src.poll()
    assert poll.ok and [(r.source, r.code, r.subject) for r in poll.records] == [
        ("journal", "79", "GPU 3"), ("journal", "24007", "NVSwitch")]
    assert codes(src) == []  # read once
    assert src.state().status == SourceStatus.ON


def test_a_fault_drill_counts_the_user_space_kmsg_write_but_never_logger(root: Path) -> None:
    write_journal(persistent(root), [entry(1, XID.format(code=13), transport="syslog", facility=0),
                                     entry(2, XID.format(code=31), facility=1, identifier="inject")])
    assert codes(source(root, drills=True)) == ["31"]


def test_it_follows_new_entries_and_rotation_in_both_journal_directories(root: Path) -> None:
    active = persistent(root)
    write_journal(active, [entry(1, XID.format(code=79))])
    src = source(root)
    assert codes(src) == ["79"]
    assert codes(src) == []
    # journald rotates: the active file is renamed to an archive, a new one takes its place
    active.rename(persistent(root, f"system@{uuid.UUID(int=7).hex}-0000000000000001-0006440000000000.journal"))
    write_journal(active, [entry(2, XID.format(code=48)), entry(3, XID.format(code=74))])
    assert codes(src) == ["48", "74"]
    # the volatile journal (Storage=volatile, or before the flush to /var) is read as well
    write_journal(root / "run/log/journal" / MACHINE / "system.journal", [entry(4, XID.format(code=94))])
    assert codes(src) == ["94"]
    assert codes(src) == []


def test_a_reopened_journal_resumes_after_the_last_entry_read(root: Path) -> None:
    write_journal(persistent(root), [entry(1, XID.format(code=79)), entry(2, XID.format(code=48))])
    src = source(root)
    assert codes(src) == ["79", "48"]
    src.close()  # as after a read error: the next poll opens the journal again
    write_journal(persistent(root, "user-1000.journal"), [entry(3, XID.format(code=74))])
    assert codes(src) == ["74"]


def test_the_boot_id_is_the_hosts() -> None:
    boot = current_boot_id()
    assert len(boot) == 32 and int(boot, 16) >= 0


def test_no_journal_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    src = source(tmp_path)
    state = src.state()
    assert state.status == SourceStatus.UNAVAILABLE and state.expected
    assert "no journal files in" in state.reason and str(tmp_path / "var/log/journal") in state.reason
    assert src.poll().ok  # nothing to read yet is not a read error: journald may start later


def test_a_file_that_is_not_a_journal_is_unavailable(tmp_path: Path) -> None:
    bad = persistent(tmp_path)
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a journal" * 100)
    state = source(tmp_path).state()
    assert state.status == SourceStatus.UNAVAILABLE and "no journal file libsystemd can read" in state.reason


def test_without_libsystemd_the_source_says_so(tmp_path: Path) -> None:
    src = JournalSource(KernelLogInterpreter(load_catalog(), GpuIndex()), str(tmp_path), boot_id=BOOT,
                        library="libsystemd-absent.so.0")
    poll = src.poll()
    assert not poll.ok and poll.error is not None and "cannot load libsystemd-absent.so.0" in poll.error
    state = src.state()
    assert state.status == SourceStatus.UNAVAILABLE and "cannot load libsystemd-absent.so.0" in state.reason


def test_the_configuration_chooses_one_kernel_log_source(tmp_path: Path) -> None:
    from autoclusters.api import KernelLogSource
    from autoclusters.detector.kmsg import DevKmsgSource, KernelLogFileSource
    from autoclusters.detector.node import NodePaths, kernel_log_source

    interp = KernelLogInterpreter(load_catalog(), GpuIndex())
    assert isinstance(kernel_log_source(NodePaths(), interp), DevKmsgSource)
    file_src = kernel_log_source(NodePaths(kernel_log_file=str(tmp_path / "kern.log")), interp)
    assert isinstance(file_src, KernelLogFileSource) and file_src.name == "file"
    journal = kernel_log_source(NodePaths(kernel_log_source=KernelLogSource.JOURNAL, journal_root="/host"), interp)
    assert isinstance(journal, JournalSource) and journal.root == "/host"
    with pytest.raises(ValueError, match="needs the file's path"):
        kernel_log_source(NodePaths(kernel_log_source=KernelLogSource.FILE), interp)


def test_the_other_kernel_log_sources_report_their_state(tmp_path: Path) -> None:
    from autoclusters.detector.kmsg import DevKmsgSource, KernelLogFileSource

    interp = KernelLogInterpreter(load_catalog(), GpuIndex())
    missing = DevKmsgSource(interp, str(tmp_path / "kmsg"))
    state = missing.state()
    assert state.status == SourceStatus.UNAVAILABLE and state.expected
    assert state.reason == f"cannot open {tmp_path / 'kmsg'}: No such file or directory"
    device = tmp_path / "kmsg"
    device.write_text("3,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    assert missing.state().status == SourceStatus.ON
    missing.close()
    log = KernelLogFileSource(str(tmp_path / "kern.log"), interp)
    assert log.state().status == SourceStatus.ON  # not written yet: read from its first line once it is
    (tmp_path / "kern.log").mkdir()  # a path that cannot be read as a file
    assert not log.poll().ok
    bad = log.state()
    assert bad.status == SourceStatus.UNAVAILABLE and bad.reason.startswith(f"cannot read {tmp_path / 'kern.log'}")


@pytest.mark.parametrize(("flags", "message"), [
    (["--kernel-log-source", "file"], "--kernel-log-source file needs --kernel-log PATH"),
    (["--kernel-log-source", "journal", "--kernel-log", "/var/log/kern.log"],
     "--kernel-log is read only with --kernel-log-source file, not journal"),
])
def test_contradicting_kernel_log_flags_are_a_usage_error(flags: list[str], message: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from autoclusters.cli.exit_codes import EXIT_USAGE
    from autoclusters.cli.main import main

    # before anything connects: the kubeconfig named here does not exist
    assert main(["detector", "run", "--node", "n1", "--kubeconfig", "/nonexistent", *flags]) == EXIT_USAGE
    assert message in capsys.readouterr().err
