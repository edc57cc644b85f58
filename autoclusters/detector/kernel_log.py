"""Parsing NVIDIA driver lines from the kernel log: GPU ``Xid`` and NVSwitch ``SXid``.

Accepted framings (each layer optional, taken off in the order a writer puts it on; one
test each in tests/unit/detector/test_kernel_log_framings.py, the table in docs/detector.md):

* a record header: ``/dev/kmsg``'s ``PRI,SEQ,USEC,FLAGS;`` (continuation lines that start
  with a space carry device properties and are skipped), ``dmesg --decode``'s
  ``kern  :err   : ``, ``dmesg --raw``'s ``<3>``; a facility other than the kernel's marks
  a user-space writer;
* a timestamp: dmesg's ``[  1234.567890]``, ``[Sun Nov 29 08:00:00 2026]``, ``[Nov29 08:00]``,
  ``[  +0.000123]``, ``2026-11-29T08:00:00,123456+00:00``; journalctl's and syslog's
  ``Nov 29 08:00:00[.123456]``, ``2026-11-29T08:00:00[.123456]+0000``,
  ``Sun 2026-11-29 08:00:00 UTC``;
* a host and program tag, ``host kernel: `` or ``kernel: `` (another program's tag marks a
  user-space writer), and after it the kernel's own ``[ 1234.567890]`` that rsyslog keeps;
* then the driver's text, bare (``journalctl -o cat``).

The driver's texts (the part after ``NVRM:`` / ``nvidia-nvswitchN:``) come in these
shapes across driver generations::

    NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.                      (old drivers)
    NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString ...
    NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:02): 94, pid=7194, ...                  (MIG)
    NVRM: Xid (PCI:10000:e1:00): 79, ...                                              (PCI domain 10000)
    nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 24007, Fatal, Link 44 ...
    nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 32 ...
    nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Severity 0 Engine instance 32 ...   (follow-up)
    nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Data {0x00000000, ...}             (follow-up)

The parser never raises on any input and returns None for everything that is not one of
these shapes; the throughput target (200,000 lines/s) is met by rejecting lines without
``Xid (`` with one substring search before any regular expression runs.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from autoclusters.detector.pci import GpuIndex, normalize
from autoclusters.detector.source_records import Record
from autoclusters.faults.catalog import Catalog, FaultClass, Severity
from autoclusters.faults.recovery import XID_RECOVERY_ACTION, parse_recovery_action, recovery_name

MAX_LINE = 2048  # the kernel's own record limit is about 1 KiB; anything longer is cut here
_MAX_CODE_DIGITS = 6

_KMSG_HEADER = re.compile(r"^(\d{1,4}),(\d{1,20}),(\d{1,20}),[^;]{0,16};")
_BUS = r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_CODE = r"(\d{1,%d})" % _MAX_CODE_DIGITS  # noqa: UP031 - a regular expression, not a message
# A MIG GPU's lines name the GPU instance, and the compute instance where known, after the
# bus id: ``(PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u)`` (open-gpu-kernel-modules,
# src/nvidia/src/kernel/gpu/rc/kernel_rc.c); the bus id alone names the GPU.
_MIG = r"((?: GPU-I:\d{1,4}(?: GPU-CI:\d{1,4})?)?)"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?" + _BUS + _MIG + r"\): " + _CODE + r",[ ]?(.*)$")
_SXID = re.compile(r"nvidia-nvswitch\d{0,3}: SXid \(PCI:" + _BUS + r"\): " + _CODE + r",[ ]?(.*)$")
# Leading process fields some drivers add before the description.
_PROC_FIELD = re.compile(r"^(?:pid=(?:'[^']{0,64}'|[^,]{0,64}),\s*)?(?:name=[^,]{0,64},\s*)?")
_DRIVER_PREFIXES = ("NVRM:", "nvidia-nvswitch")
# ``dmesg --decode``: facility and level names, each padded to 6 (util-linux 2.38.1 prints
# ``kern  :warn  : [ 8123.456801] ...``).
_DECODE_PREFIX = re.compile(r"^([a-z0-9]{2,8}) {0,6}:([a-z]{3,7}) {0,6}: ")
# ISO 8601 stamps: ``dmesg --time-format iso`` (``2026-11-29T08:12:03,456801+00:00``),
# journalctl ``short-iso`` / ``short-iso-precise`` (``2026-11-29T08:12:03.456801+0000``),
# rsyslog's ``RSYSLOG_FileFormat`` (RFC 3339, ``2026-11-29T08:12:03.456801+00:00``).
_ISO_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? ")
# RFC 3164 stamps: journalctl ``short`` / ``short-precise`` (``Nov 29 08:12:03[.456801]``),
# rsyslog's ``RSYSLOG_TraditionalFileFormat`` (``Nov  9 08:12:03``, the day padded with a
# space); journalctl ``short-full`` (``Sun 2026-11-29 08:12:03 UTC``).
_SYSLOG_STAMP = re.compile(r"^[A-Z][a-z]{2} (?:[ \d]\d|\d{4}-\d\d-\d\d) \d\d:\d\d:\d\d(?:\.\d{1,9})? ")
_ZONE = re.compile(r"^[A-Za-z0-9+/_-]{1,32} ")  # short-full's zone after its date-time
# The host (absent with ``journalctl --no-hostname``) and the program's tag: ``gpu-a kernel: ``.
_HOST_TAG = re.compile(r"^(?:[^\s:\[]{1,255} )?([^\s:]{1,64}): ")
# The common case in one step: a /dev/kmsg record carrying an Xid or SXid line.
_KMSG_FAST = re.compile(r"^(\d{1,4}),\d{1,20},\d{1,20},[^;]{0,16};(?:NVRM: Xid|nvidia-nvswitch\d{0,3}: (S)Xid) "
                        r"\((?:PCI:)?" + _BUS + _MIG + r"\): " + _CODE + r",[ ]?(.*)$")


class DriverLine(NamedTuple):
    """One parsed driver fault line, before the catalog gives it meaning."""

    kind: str  # "xid" or "sxid"
    bus_id: str  # normalised, e.g. "0000:3b:00"
    code: int
    text: str  # the driver's description with process fields removed
    fatal: bool | None = None  # SXid only: the driver's own Fatal / Non-fatal flag
    from_kernel: bool = True  # False when the framing shows a user-space writer
    instance: str = ""  # Xid on a MIG GPU: the instances the driver names ("GPU-I:05 GPU-CI:02")


def _strip_framing(line: str) -> tuple[str, bool] | None:
    """The message text and whether the framing says the kernel wrote it.

    The layers come off in the order a log writer puts them on: the record header
    (``/dev/kmsg``, ``dmesg --decode``, ``dmesg --raw``), a timestamp (``dmesg``'s or a
    journal's or syslog's), a host and program tag (``host kernel: ``), and a kernel
    timestamp that a syslog daemon left inside the message. Each is optional.
    """
    if line.startswith(" "):
        return None  # /dev/kmsg continuation (device properties)
    from_kernel = True
    text = line
    first = text[:1]
    if first.isdigit():
        m = _KMSG_HEADER.match(text)
        if m:
            from_kernel = int(m.group(1)) >> 3 == 0  # user writes to /dev/kmsg get facility 1 or more
            text = text[m.end():]
    elif first.islower() and not text.startswith(_DRIVER_PREFIXES):
        m = _DECODE_PREFIX.match(text)
        if m:
            from_kernel = m.group(1) == "kern"  # dmesg names the facility; "user" is a write from user space
            text = text[m.end():]
    if text.startswith("<"):
        end = text.find(">", 0, 5)
        if end > 0:
            pri = text[1:end]
            from_kernel = from_kernel and (not pri.isdigit() or int(pri) >> 3 == 0)
            text = text[end + 1:]
    if text.startswith(_DRIVER_PREFIXES):
        return text, from_kernel
    if text.startswith("["):
        end = text.find("] ", 0, 64)
        if end > 0:
            text = text[end + 2:]
    elif text[:1].isdigit():
        m = _ISO_STAMP.match(text)
        if m:
            text = text[m.end():]
    elif text[:1].isupper():
        m = _SYSLOG_STAMP.match(text)
        if m:
            text = text[m.end():]
            if m.group(0)[8:9] == "-":  # short-full's date: a zone follows
                z = _ZONE.match(text)
                text = text[z.end():] if z else text
    if text.startswith(_DRIVER_PREFIXES):
        return text, from_kernel
    m = _HOST_TAG.match(text)
    if m:
        from_kernel = from_kernel and m.group(1) == "kernel"  # syslog line of another program otherwise
        text = text[m.end():]
        if text.startswith("["):  # rsyslog's imklog keeps the kernel's own timestamp in the message
            end = text.find("] ", 0, 64)
            if end > 0:
                text = text[end + 2:]
    return text, from_kernel


def parse_line(line: str) -> DriverLine | None:
    """The Xid/SXid a kernel log line reports, or None. Never raises."""
    if "Xid (" not in line:
        return None
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE]
    line = line.rstrip("\r\n")
    fast = _KMSG_FAST.match(line)
    if fast:
        from_kernel = int(fast.group(1)) >> 3 == 0
        kind = "sxid" if fast.group(2) else "xid"
        raw_bus, mig, code_text, rest = fast.group(3, 4, 5, 6)
    else:
        framed = _strip_framing(line)
        if framed is None:
            return None
        text, from_kernel = framed
        if text.startswith("NVRM: Xid ("):
            m = _XID.match(text)
            if not m:
                return None
            kind = "xid"
            raw_bus, mig, code_text, rest = m.group(1, 2, 3, 4)
        else:
            m = _SXID.match(text)
            if not m:
                return None
            kind = "sxid"
            raw_bus, code_text, rest = m.group(1, 2, 3)
            mig = ""
    if len(raw_bus) == 10 and raw_bus == raw_bus.lower():  # the driver's usual "0000:3b:00": already normal
        bus = raw_bus
    else:
        bus = normalize(raw_bus)
        if bus is None:
            return None
    code = int(code_text)
    fatal: bool | None = None
    if kind == "xid":
        rest = rest[_PROC_FIELD.match(rest).end():]  # type: ignore[union-attr]
    else:
        if rest.startswith(("Severity ", "Data {")):
            return None  # follow-up lines repeat the code of the line before; that line counted
        if rest.startswith("Fatal"):
            fatal = True
        elif rest.startswith("Non-fatal") or rest.startswith("Non-Fatal"):
            fatal = False
    return DriverLine(kind, bus, code, rest.strip(), fatal, from_kernel, mig[1:])


class KernelLogInterpreter:
    """Turns parsed driver lines into records with the catalog's names and severities."""

    def __init__(self, catalog: Catalog, gpus: GpuIndex, *, source: str = "kmsg",
                 accept_user_lines: bool = False) -> None:
        self.catalog = catalog
        self._gpus = gpus
        self.source = source
        self.accept_user_lines = accept_user_lines
        self._cache: dict[tuple[str, str, int, bool | None], Record] = {}

    @property
    def gpus(self) -> GpuIndex:
        return self._gpus

    @gpus.setter
    def gpus(self, value: GpuIndex) -> None:
        self._gpus = value
        self._cache = {}  # subjects depend on the map

    def record(self, line: str) -> Record | None:
        parsed = parse_line(line)
        if parsed is None or (not parsed.from_kernel and not self.accept_user_lines):
            return None
        return self.to_record(parsed)

    def to_record(self, parsed: DriverLine) -> Record:
        base = self._cache.get((parsed.kind, parsed.bus_id, parsed.code, parsed.fatal))
        if base is not None and parsed.kind == "xid" and str(parsed.code) == XID_RECOVERY_ACTION:
            base = None  # Xid 154: the name carries the action its text asks for, not cached
        if base is None:
            base = self._base(parsed)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[(parsed.kind, parsed.bus_id, parsed.code, parsed.fatal)] = base
        if parsed.kind == "sxid":
            detail = f"PCI:{parsed.bus_id} {parsed.text[:240]}"
        else:
            detail = f"{parsed.instance}: {parsed.text[:230]}" if parsed.instance else parsed.text[:256]
        return Record(base.source, base.fault_class, base.code, base.subject, base.severity, base.name, base.known,
                      detail)

    def _base(self, parsed: DriverLine) -> Record:
        """The record without its detail text; the same for every repeat of a fault (cached)."""
        if parsed.kind == "xid":
            entry = self.catalog.entry_or_unknown(FaultClass.GPU, parsed.code)
            known = self.catalog.lookup(FaultClass.GPU, parsed.code) is not None
            name = entry.name
            if str(parsed.code) == XID_RECOVERY_ACTION:  # the recovery the driver asks for decides the repair
                name = recovery_name(parse_recovery_action(parsed.text)) or name
            return Record(self.source, FaultClass.GPU, str(parsed.code), self.gpus.subject(parsed.bus_id),
                          entry.severity, name, known)
        entry = self.catalog.entry_or_unknown(FaultClass.NVSWITCH, parsed.code)
        known = self.catalog.lookup(FaultClass.NVSWITCH, parsed.code) is not None
        severity = entry.severity
        if parsed.fatal is False and severity == Severity.FATAL:
            severity = Severity.WARNING  # the driver itself says this occurrence is not fatal
        return Record(self.source, FaultClass.NVSWITCH, str(parsed.code), "NVSwitch", severity, entry.name, known)


def format_xid_line(bus_id: str, code: int, text: str, *, pid: str = "'<unknown>'", name: str = "<unknown>") -> str:
    """An Xid line as a current driver writes it (used by fault injection)."""
    return f"NVRM: Xid (PCI:{normalize(bus_id) or bus_id}): {code}, pid={pid}, name={name}, {text}"


def format_sxid_line(switch: int, bus_id: str, code: int, text: str, *, fatal: bool = True) -> str:
    flag = "Fatal" if fatal else "Non-fatal"
    return f"nvidia-nvswitch{switch}: SXid (PCI:{normalize(bus_id) or bus_id}.0): {code}, {flag}, {text}"


def kmsg_record(seq: int, usec: int, text: str, *, priority: int = 3) -> str:
    """A ``/dev/kmsg`` record with kernel facility (0) and the given level."""
    return f"{priority},{seq},{usec},-;{text}"
