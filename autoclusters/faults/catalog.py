"""Loading and querying the fault catalog (strict schema, frozen records)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from autoclusters import names as n
from autoclusters.api import CatalogAction, ClassAction, FaultClass, XidBucket
from autoclusters.faults.buckets import BUCKETS, Severity
from autoclusters.faults.contract import read_fault
from autoclusters.faults.recovery import XID_RECOVERY_ACTION, action_from_name


class CatalogError(ValueError):
    """A catalog file that does not follow the schema; the message names the entry and key."""


@dataclass(frozen=True)
class FaultEntry:
    fault_class: FaultClass
    code: str  # "79", "24007", "DCGM_FR_NVLINK_DOWN", "port_down"
    name: str
    severity: Severity
    action: CatalogAction
    description: str = ""
    bucket: XidBucket | None = None  # NVIDIA's resolution bucket (every GPU entry has one)

    @property
    def key(self) -> str:
        return f"{self.fault_class}:{self.code}"

    @property
    def application(self) -> bool:
        """NVIDIA treats the code as an application or software error (never a node repair
        unless a pool names it in ``spec.repairCodes``)."""
        return self.bucket is not None and BUCKETS[self.bucket].application


@dataclass(frozen=True)
class FaultRef:
    """A fault as the controller sees it, read back from a node condition."""

    fault_class: FaultClass
    code: str
    action: CatalogAction
    known: bool
    reason: str
    message: str
    application: bool = False  # its bucket is an application or software one (FaultEntry.application)

    @property
    def key(self) -> str:
        return f"{self.fault_class}:{self.code}"


_ENTRY_KEYS = {"code", "name", "bucket", "severity", "action", "description"}
_TOP_KEYS = {"version", "sources", "unknown", "classes"}


@dataclass(frozen=True)
class Catalog:
    entries: dict[str, FaultEntry]
    unknown_action: dict[FaultClass, CatalogAction]
    unknown_severity: dict[FaultClass, Severity]
    sources: tuple[str, ...] = field(default=())
    # (condition prefix, type, reason, message) of a True condition -> its fault: the controller
    # reads the same few conditions on every event of a faulty node (fault_from_condition)
    _read: dict[tuple[str, str, str, str], FaultRef | None] = field(default_factory=dict, init=False,
                                                                     repr=False, compare=False)

    def lookup(self, fault_class: FaultClass | str, code: str | int) -> FaultEntry | None:
        return self.entries.get(f"{FaultClass(fault_class)}:{code}")

    def entry_or_unknown(self, fault_class: FaultClass | str, code: str | int) -> FaultEntry:
        """The catalogued entry, or the documented default for an unknown code of that class."""
        fc = FaultClass(fault_class)
        found = self.lookup(fc, code)
        if found:
            return found
        return FaultEntry(fc, str(code), f"unknown {fc} code {code}", self.unknown_severity[fc],
                          self.unknown_action[fc], "not in the catalog; default for its class applies")

    def action_of(self, fault_class: FaultClass | str, code: str | int, name: str) -> CatalogAction:
        """The action of one fault as a record or condition names it: the catalog's (or the
        unknown default), except Xid 154, whose line names the recovery the driver asks for
        (``faults/recovery.py``; ``name`` is the record's name or the condition's message)."""
        fc = FaultClass(fault_class)
        if fc == FaultClass.GPU and str(code) == XID_RECOVERY_ACTION:
            return action_from_name(name)
        entry = self.lookup(fc, code)
        return entry.action if entry else self.unknown_action[fc]

    def of_class(self, fault_class: FaultClass) -> list[FaultEntry]:
        return [e for e in self.entries.values() if e.fault_class == fault_class]

    # --- reading a fault back from a node condition ----------------------------------
    def fault_from_condition(self, condition: dict[str, Any], names: n.Names) -> FaultRef | None:
        """The fault a True fault condition describes, or None when it reports no fault."""
        if condition.get("status") != "True":
            return None
        ctype = condition.get("type", "")
        reason = condition.get("reason", "") or ""
        message = condition.get("message", "") or ""
        key = (names.prefix, ctype, reason, message)
        try:
            return self._read[key]
        except KeyError:
            pass
        if len(self._read) >= _READ_MEMO_SIZE:
            self._read.clear()  # many distinct messages: start over rather than grow
        ref = self._fault_from(ctype, reason, message, names)
        self._read[key] = ref
        return ref

    def _fault_from(self, ctype: str, reason: str, message: str, names: n.Names) -> FaultRef | None:
        read = read_fault(ctype, reason, message, names)
        if read is None:
            return None
        fc, code = read
        entry = self.lookup(fc, code)
        return FaultRef(fc, code, self.action_of(fc, code, message), entry is not None, reason, message,
                        application=entry is not None and entry.application)


_READ_MEMO_SIZE = 4096


def _enum(cls: type[StrEnum], value: Any, where: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(v.value for v in cls)
        raise CatalogError(f"{where}: {value!r} is not one of {allowed}") from None


def _entry(fc: FaultClass, item: dict[str, Any], where: str) -> FaultEntry:
    """One entry. A GPU entry names NVIDIA's bucket, which gives its severity and action
    (``faults/buckets.py``); it may repeat them, never contradict them. Other classes (not in
    NVIDIA's Xid Catalog) give severity and action themselves."""
    if fc == FaultClass.GPU:
        missing = {"code", "name", "bucket"} - set(item)
    else:
        missing = {"code", "name", "severity", "action"} - set(item)
        if "bucket" in item:
            raise CatalogError(f"{where}.bucket: only gpu entries have NVIDIA's Xid buckets")
    if missing:
        raise CatalogError(f"{where}: missing keys {sorted(missing)}")
    if item.get("action") == ClassAction.OFF:
        raise CatalogError(f"{where}.action: 'off' is a per-pool override, not a catalog action")
    bucket: XidBucket | None = None
    if fc == FaultClass.GPU:
        bucket = _enum(XidBucket, item["bucket"], f"{where}.bucket")
        rule = BUCKETS[bucket]
        severity = _enum(Severity, item.get("severity", rule.severity), f"{where}.severity")
        action = _enum(CatalogAction, item.get("action", rule.action), f"{where}.action")
        if (severity, action) != (rule.severity, rule.action):
            raise CatalogError(f"{where}: bucket {bucket} means severity {rule.severity}, action {rule.action}; "
                               f"the entry says {severity}, {action}")
    else:
        severity = _enum(Severity, item["severity"], f"{where}.severity")
        action = _enum(CatalogAction, item["action"], f"{where}.action")
    return FaultEntry(fc, str(item["code"]), str(item["name"]), severity, action,
                      str(item.get("description", "")), bucket)


def parse_catalog(data: Any, origin: str = "catalog") -> Catalog:
    if not isinstance(data, dict):
        raise CatalogError(f"{origin}: top level must be a mapping")
    extra = set(data) - _TOP_KEYS
    if extra:
        raise CatalogError(f"{origin}: unknown top-level keys {sorted(extra)}")
    if data.get("version") != 1:
        raise CatalogError(f"{origin}: version must be 1")
    entries: dict[str, FaultEntry] = {}
    classes = data.get("classes") or {}
    if not isinstance(classes, dict):
        raise CatalogError(f"{origin}: classes must be a mapping of class -> list of entries")
    for cls_name, items in classes.items():
        fc = _enum(FaultClass, cls_name, f"{origin}: classes")
        if not isinstance(items, list):
            raise CatalogError(f"{origin}: classes.{cls_name} must be a list")
        for i, item in enumerate(items):
            where = f"{origin}: classes.{cls_name}[{i}]"
            if not isinstance(item, dict):
                raise CatalogError(f"{where} must be a mapping")
            extra = set(item) - _ENTRY_KEYS
            if extra:
                raise CatalogError(f"{where}: unknown keys {sorted(extra)}")
            entry = _entry(fc, item, where)
            if entry.key in entries:
                raise CatalogError(f"{where}: duplicate code {entry.code}")
            entries[entry.key] = entry
    unknown = data.get("unknown") or {}
    ua: dict[FaultClass, CatalogAction] = {}
    us: dict[FaultClass, Severity] = {}
    for fc in FaultClass:
        spec = unknown.get(fc.value)
        if not isinstance(spec, dict) or set(spec) - {"action", "severity"}:
            raise CatalogError(f"{origin}: unknown.{fc.value} must give action and severity (and nothing else)")
        if spec.get("action") == ClassAction.OFF:  # accepted here before, though no entry may say it
            raise CatalogError(f"{origin}: unknown.{fc.value}.action: 'off' is a per-pool override, "
                               "not a catalog action")
        ua[fc] = _enum(CatalogAction, spec.get("action"), f"{origin}: unknown.{fc.value}.action")
        us[fc] = _enum(Severity, spec.get("severity"), f"{origin}: unknown.{fc.value}.severity")
    return Catalog(entries, ua, us, tuple(data.get("sources") or ()))


@cache
def load_catalog(path: str | None = None) -> Catalog:
    """The shipped catalog, or one at ``path`` (an operator's own)."""
    if path:
        text = Path(path).read_text()
        origin = path
    else:
        text = resources.files("autoclusters.faults").joinpath("catalog.yaml").read_text()
        origin = "catalog.yaml"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CatalogError(f"{origin}: not valid YAML: {e}") from e
    return parse_catalog(data, origin)
