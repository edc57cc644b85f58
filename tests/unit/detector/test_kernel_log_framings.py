"""Every framing a driver line reaches a log source in, and every shape of the driver's own text.

Each framing line below is the shape the named tool prints, with the same Xid 79 inside:
the dmesg shapes as util-linux 2.38.1's ``dmesg`` prints them, the journal shapes as
systemd 252's ``journalctl -o MODE`` prints a kernel entry, the syslog shapes as rsyslog's
two file templates write them. The driver's text shapes follow the format strings of
NVIDIA's open-gpu-kernel-modules (``src/nvidia/src/kernel/gpu/rc/kernel_rc.c``:
``NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s``) and
the examples in NVIDIA's Xid and A100 memory error documents.
"""

from __future__ import annotations

import pytest

from autoclusters.detector.kernel_log import KernelLogInterpreter, parse_line
from autoclusters.detector.pci import GpuIndex
from autoclusters.faults.catalog import FaultClass, load_catalog

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus."

KERNEL_FRAMINGS = {
    # /dev/kmsg: "PRI,SEQ,USEC,FLAGS;TEXT" (the kernel's Documentation/ABI/testing/dev-kmsg)
    "kmsg": f"3,10223,8123456801,-;{XID}",
    "kmsg continuation flag": f"3,10223,8123456801,c;{XID}",
    # dmesg: seconds since boot (the default), --ctime/-T, --time-format iso/reltime/delta
    "dmesg": f"[ 8123.456801] {XID}",
    "dmesg -T": f"[Sun Nov 29 08:12:03 2026] {XID}",
    "dmesg --time-format iso": f"2026-11-29T08:12:03,456801+00:00 {XID}",
    "dmesg --time-format reltime": f"[Nov29 08:12] {XID}",
    "dmesg --time-format delta": f"[  +0.000123] {XID}",
    # dmesg --decode: "%-6s:%-6s: " facility and level, before any timestamp
    "dmesg -x": f"kern  :err   : [ 8123.456801] {XID}",
    "dmesg -x -T": f"kern  :err   : [Sun Nov 29 08:12:03 2026] {XID}",
    "dmesg -x --time-format iso": f"kern  :err   : 2026-11-29T08:12:03,456801+00:00 {XID}",
    "dmesg -x --notime": f"kern  :warn  : {XID}",
    # dmesg --raw: the record's "<PRI>" (facility 0 = kernel)
    "dmesg -r": f"<3>[ 8123.456801] {XID}",
    # journalctl -o MODE for a _TRANSPORT=kernel entry, with the host and with --no-hostname
    "journal short": f"Nov 29 08:12:03 gpu-node-17 kernel: {XID}",
    "journal short, no host": f"Nov 29 08:12:03 kernel: {XID}",
    "journal short, early day": f"Nov 09 08:12:03 gpu-node-17 kernel: {XID}",
    "journal short, upper-case host": f"Nov 29 08:12:03 GPU-Node-17 kernel: {XID}",
    "dmesg -x, level emerg": f"kern  :emerg : [ 8123.456801] {XID}",
    "journal short-iso": f"2026-11-29T08:12:03+0000 gpu-node-17 kernel: {XID}",
    "journal short-iso, no host": f"2026-11-29T08:12:03+0000 kernel: {XID}",
    "journal short-precise": f"Nov 29 08:12:03.456801 gpu-node-17 kernel: {XID}",
    "journal short-precise, no host": f"Nov 29 08:12:03.456801 kernel: {XID}",
    "journal short-iso-precise": f"2026-11-29T08:12:03.456801+0000 gpu-node-17 kernel: {XID}",
    "journal short-full": f"Sun 2026-11-29 08:12:03 UTC gpu-node-17 kernel: {XID}",
    "journal short-monotonic": f"[ 8123.456801] gpu-node-17 kernel: {XID}",
    "journal cat": XID,
    "bare kernel: prefix": f"kernel: {XID}",
    # rsyslog: RSYSLOG_TraditionalFileFormat (RFC 3164 stamp, day padded with a space) and
    # RSYSLOG_FileFormat (RFC 3339); imklog keeps the kernel's own timestamp in the message
    "syslog traditional": f"Nov  9 08:12:03 gpu-node-17 kernel: {XID}",
    "syslog traditional, kernel stamp": f"Nov  9 08:12:03 gpu-node-17 kernel: [ 8123.456801] {XID}",
    "syslog RFC 3339": f"2026-11-29T08:12:03.456801+00:00 gpu-node-17 kernel: {XID}",
    "syslog RFC 3339, kernel stamp": f"2026-11-29T08:12:03.456801+00:00 gpu-node-17 kernel: [ 8123.456801] {XID}",
}

# The same text, but the framing shows a writer in user space: never a fault unless drills are accepted.
USER_FRAMINGS = {
    "kmsg, facility user": f"12,10224,8123456802,-;{XID}",
    "dmesg -x, facility user": f"user  :err   : [ 8123.456802] {XID}",
    "dmesg -x, facility local0": f"local0:err   : [ 8123.456802] {XID}",
    "dmesg -r, facility user": f"<12>[ 8123.456802] {XID}",
    "journal short, another program": f"Nov 29 08:12:03 gpu-node-17 gpu-monitor[4242]: {XID}",
    "syslog, another program": f"Nov  9 08:12:03 gpu-node-17 gpu-monitor: {XID}",
    "journal short-iso, another program, no host": f"2026-11-29T08:12:03+0000 gpu-monitor[4242]: {XID}",
}


@pytest.mark.parametrize("framing", sorted(KERNEL_FRAMINGS))
def test_each_framing_reads_as_the_kernel_wrote_it(framing: str) -> None:
    p = parse_line(KERNEL_FRAMINGS[framing])
    assert p is not None, framing
    assert (p.kind, p.bus_id, p.code, p.text, p.from_kernel) == (
        "xid", "0000:3b:00", 79, "GPU has fallen off the bus.", True), framing


@pytest.mark.parametrize("framing", sorted(USER_FRAMINGS))
def test_each_user_space_framing_is_kept_out(framing: str) -> None:
    line = USER_FRAMINGS[framing]
    p = parse_line(line)
    assert p is not None and p.code == 79 and not p.from_kernel, framing
    strict = KernelLogInterpreter(load_catalog(), GpuIndex())
    drills = KernelLogInterpreter(load_catalog(), GpuIndex(), accept_user_lines=True)
    assert strict.record(line) is None
    assert drills.record(line) is not None


@pytest.mark.parametrize(("line", "bus", "code", "text"), [
    # no process fields (older drivers, and the kernel_rc.c path without a channel)
    ("NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the "
     "framebuffer at partition 6, subpartition 0.", "0000:3b:00", 48,
     "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
     "subpartition 0."),
    # pid only (NVIDIA's A100 memory error document's Xid 94 example, MIG off)
    ("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No",
     "0000:01:00", 94, "Contained: CE User Channel (0x9). RST: No, D-RST: No"),
    # pid and name unknown, as kernel_rc.c prints them without a channel in error
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "0000:3b:00", 79, "GPU has fallen off the bus."),
    # pid, name and the channel fields after them
    ("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH "
     "TIMEOUT, Info 0x58005", "0000:cb:00", 109, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"),
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=2847, name=python3, Ch 00000010, intr 10000000. MMU Fault: ENGINE "
     "GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_9a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
     "0000:3b:00", 31, "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
     "0x7f1c_9a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
    # the old driver's form: no "PCI:", a channel field and no process
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", "0000:03:00", 14, "Channel 00000001"),
    # PCI domains other than 0000: a second segment, a VMD domain (5 digits, "%04x" prints
    # them all), and NVML's 8-digit form with upper-case hex
    ("NVRM: Xid (PCI:0001:3b:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus.", "0001:3b:00", 79,
     "GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:10000:e1:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus.", "10000:e1:00", 79,
     "GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:00000002:3B:00): 79, GPU has fallen off the bus.", "0002:3b:00", 79,
     "GPU has fallen off the bus."),
])
def test_driver_text_shapes(line: str, bus: str, code: int, text: str) -> None:
    for framed in (line, f"4,77,123456,-;{line}", f"Nov 29 08:12:03 gpu-node-17 kernel: {line}"):
        p = parse_line(framed)
        assert p is not None, framed
        assert (p.bus_id, p.code, p.text, p.instance) == (bus, code, text, ""), framed


@pytest.mark.parametrize(("line", "instance", "text"), [
    # NVIDIA's A100 memory error document, MIG on: the GPU instance only
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
     "GPU-I:05", "Contained: CE User Channel (0x9). RST: No, D-RST: No"),
    # kernel_rc.c's format with both instances
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:02): 13, pid=9137, name=python3, Graphics Exception: ESR "
     "0x504648=0x1000e 0x504650=0x20", "GPU-I:01 GPU-CI:02", "Graphics Exception: ESR 0x504648=0x1000e 0x504650=0x20"),
])
def test_a_mig_line_names_the_gpu_by_its_bus_id(line: str, instance: str, text: str) -> None:
    interp = KernelLogInterpreter(load_catalog(), GpuIndex({"0000:01:00": 2, "0000:3b:00": 3}))
    for framed in (line, f"4,77,123456,-;{line}", f"kern  :warn  : [ 8123.456801] {line}"):
        p = parse_line(framed)
        assert p is not None, framed
        assert (p.bus_id, p.instance, p.text) == ("0000:01:00", instance, text), framed
        rec = interp.record(framed)
        assert rec is not None and rec.fault_class == FaultClass.GPU
        assert rec.subject == "GPU 2"  # the GPU, whichever instance; the instance is in the detail
        assert rec.detail == f"{instance}: {text}"


def test_a_domain_other_than_0000_maps_to_its_gpu() -> None:
    # NVML names bus ids with 8 domain digits; the driver with "%04x"
    gpus = GpuIndex({"00000001:3B:00.0": 5, "00010000:E1:00.0": 6, "00000000:3B:00.0": 1})
    interp = KernelLogInterpreter(load_catalog(), gpus)
    subjects = [interp.record(f"NVRM: Xid (PCI:{bus}): 79, GPU has fallen off the bus.").subject  # type: ignore[union-attr]
                for bus in ("0001:3b:00", "10000:e1:00", "0000:3b:00")]
    assert subjects == ["GPU 5", "GPU 6", "GPU 1"]


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:01:00 GPU-X:05): 94, x",  # not an instance the driver names
    "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01 GPU-CI:02): 94, x",  # more instances than the driver prints
    "NVRM: Xid (PCI:0000:01:00 GPU-I:): 94, x",
    "NVRM: Xid (PCI:0000:01:00 GPU-CI:02): 94, x",  # a compute instance comes only after its GPU instance
    "NVRM: Xid (PCI:0000:01:00 GPU-CI:02 GPU-I:01): 94, x",
    "Nov 29 08:12:03 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00) 79, x",  # no colon after the bus
    "kern  :err   : NVRM: GPU at PCI:0000:3b:00: GPU-6f2b1c0e",  # a driver line that is not an Xid
])
def test_near_misses_in_every_framing_are_not_faults(line: str) -> None:
    assert parse_line(line) is None
