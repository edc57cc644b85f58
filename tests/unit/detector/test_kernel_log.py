from pathlib import Path

import pytest

from autoclusters.detector.conditions import message_for, reason_for
from autoclusters.detector.kernel_log import KernelLogInterpreter, format_sxid_line, format_xid_line, parse_line
from autoclusters.detector.pci import GpuIndex
from autoclusters.faults.catalog import FaultClass, Severity, load_catalog

FIXTURES = Path(__file__).parents[2] / "fixtures" / "kmsg"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


@pytest.fixture
def interp() -> KernelLogInterpreter:
    return KernelLogInterpreter(load_catalog(), GpuIndex({"0000:3b:00": 3, "0000:07:00": 0}))


def test_every_catalogued_xid_has_a_fixture_line_that_parses_to_it() -> None:
    catalogued = {int(e.code) for e in load_catalog().of_class(FaultClass.GPU) if e.code.isdigit()}
    parsed = {p.code for p in (parse_line(x) for x in lines("xid-all-codes.kmsg")) if p}
    assert catalogued <= parsed, f"no fixture line for Xid {sorted(catalogued - parsed)}"
    assert len(parsed) == len(lines("xid-all-codes.kmsg"))


def test_every_catalogued_sxid_has_a_fixture_line() -> None:
    catalogued = {int(e.code) for e in load_catalog().of_class(FaultClass.NVSWITCH)}
    parsed = {p.code for p in (parse_line(x) for x in lines("sxid.dmesg")) if p}
    assert catalogued <= parsed


def test_all_framings_and_driver_generations_read_the_same_fault(interp: KernelLogInterpreter) -> None:
    for line in lines("xid-variants.log"):
        rec = interp.record(line)
        assert rec is not None, line
        assert (rec.fault_class, rec.code, rec.subject) == (FaultClass.GPU, "79", "GPU 3"), line
        assert message_for(rec) == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
        assert reason_for(rec) == "NvidiaXIDError"


def test_process_fields_are_removed_from_the_description() -> None:
    p = parse_line("NVRM: Xid (PCI:0000:3b:00): 13, pid=2847, name=python3, Graphics SM Warp Exception")
    assert p is not None and p.text == "Graphics SM Warp Exception"
    p = parse_line("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    assert p is not None and p.text == "GPU has fallen off the bus."


def test_noise_and_near_misses_never_become_faults(interp: KernelLogInterpreter) -> None:
    assert [interp.record(x) for x in lines("noise.kmsg")] == [None] * len(lines("noise.kmsg"))


def test_user_space_writes_count_only_when_drills_are_accepted() -> None:
    line = "12,9,5000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
    strict = KernelLogInterpreter(load_catalog(), GpuIndex())
    drills = KernelLogInterpreter(load_catalog(), GpuIndex(), accept_user_lines=True)
    assert strict.record(line) is None
    rec = drills.record(line)
    assert rec is not None and rec.subject == "GPU PCI:0000:3b:00"


def test_sxid_fatal_flag_and_follow_up_lines(interp: KernelLogInterpreter) -> None:
    recs = [interp.record(x) for x in lines("sxid.dmesg")]
    got = [(r.code, r.severity) for r in recs if r]
    assert ("24007", Severity.FATAL) in got
    assert ("12028", Severity.WARNING) in got
    assert ("11012", Severity.WARNING) in got
    assert sum(1 for c, _ in got if c == "24007") == 1  # follow-up lines do not repeat the fault
    r = next(r for r in recs if r and r.code == "24007")
    assert message_for(r) == "NVSwitch reported SXID 24007." and reason_for(r) == "NvidiaSXIDError"


def test_a_fatal_catalogued_sxid_logged_non_fatal_is_a_warning(interp: KernelLogInterpreter) -> None:
    rec = interp.record(format_sxid_line(1, "0000:c5:00", 24007, "Link 3 SOE", fatal=False))
    assert rec is not None and rec.severity == Severity.WARNING


def test_unknown_codes_use_the_class_default_and_keep_their_number(interp: KernelLogInterpreter) -> None:
    rec = interp.record(format_xid_line("0000:3b:00", 999, "Something new"))
    assert rec is not None and not rec.known and rec.severity == Severity.FATAL
    assert message_for(rec) == "GPU 3 reported Xid 999 (not in the fault catalog)."
    sx = interp.record(format_sxid_line(0, "0000:c4:00", 31337, "new", fatal=False))
    assert sx is not None and sx.severity == Severity.WARNING and sx.code == "31337"


def test_format_helpers_round_trip() -> None:
    p = parse_line(format_xid_line("00000000:3B:00.0", 48, "An uncorrectable double bit error"))
    assert p is not None and (p.bus_id, p.code) == ("0000:3b:00", 48)


def test_the_live_kernel_log_of_this_machine_reads_without_inventing_faults() -> None:
    import os

    from autoclusters.detector.kmsg import DevKmsgSource

    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    src = DevKmsgSource(KernelLogInterpreter(load_catalog(), GpuIndex()))
    first = src.poll()
    src.close()
    assert first.ok
    if not os.path.exists("/proc/driver/nvidia"):  # no NVIDIA driver: no driver line can be in the log
        assert first.records == ()


def test_file_source_follows_appends_partial_lines_and_replacement(tmp_path: Path) -> None:
    from autoclusters.detector.kmsg import KernelLogFileSource

    log = tmp_path / "kmsg"
    src = KernelLogFileSource(str(log), KernelLogInterpreter(load_catalog(), GpuIndex({"0000:3b:00": 3})))
    assert src.poll().ok  # not there yet: nothing, no error
    line = "3,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
    log.write_text(line[:30])
    assert src.poll().records == ()  # half a line waits for the rest
    with open(log, "a") as f:
        f.write(line[30:])
    assert [r.code for r in src.poll().records] == ["79"]
    assert src.poll().records == ()  # read once
    replacement = tmp_path / "new"
    replacement.write_text(line.replace(": 79,", ": 48,"))
    os_replace = __import__("os").replace
    os_replace(replacement, log)  # a new boot's log
    assert [r.code for r in src.poll().records] == ["48"]
