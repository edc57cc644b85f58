"""What NVML says about the node's GPUs, read once: the detector logs it when NVML starts,
``autoclusters detector inventory`` prints it, and ``tools/gpu-check.sh`` shows it.

Every query that fails is listed under ``unreadable`` with NVML's error (``Not Supported``
for remapped rows before Ampere, NVLink on a PCIe card), so the inventory says what could
not be read instead of leaving it out.
"""

from __future__ import annotations

from typing import Any


def _text(value: Any) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


class _Reader:
    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.unreadable: list[str] = []

    def ask(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            self.unreadable.append(f"{what}: {e}")
            return None


def _gpu(r: _Reader, i: int) -> dict[str, Any]:
    lib = r.lib
    out: dict[str, Any] = {"index": i}
    h = r.ask(f"GPU {i} handle", lib.nvmlDeviceGetHandleByIndex, i)
    if h is None:
        return out
    pci = r.ask(f"GPU {i} PCI info", lib.nvmlDeviceGetPciInfo, h)
    out["pciBusId"] = _text(pci.busId) if pci is not None else None
    for key, fn in (("uuid", lib.nvmlDeviceGetUUID), ("name", lib.nvmlDeviceGetName)):
        value = r.ask(f"GPU {i} {key}", fn, h)
        out[key] = _text(value) if value is not None else None
    unc = lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    out["eccUncorrected"] = {
        "volatile": r.ask(f"GPU {i} volatile ECC", lib.nvmlDeviceGetTotalEccErrors, h, unc, lib.NVML_VOLATILE_ECC),
        "aggregate": r.ask(f"GPU {i} aggregate ECC", lib.nvmlDeviceGetTotalEccErrors, h, unc,
                           lib.NVML_AGGREGATE_ECC),
    }
    rows = r.ask(f"GPU {i} remapped rows", lib.nvmlDeviceGetRemappedRows, h)
    out["remappedRows"] = None if rows is None else dict(zip(
        ("correctable", "uncorrectable", "pending", "failure"), (int(x) for x in rows), strict=False))
    pending = r.ask(f"GPU {i} retired pages", lib.nvmlDeviceGetRetiredPagesPendingStatus, h)
    out["retiredPagesPending"] = None if pending is None else pending == lib.NVML_FEATURE_ENABLED
    links: list[str] = []
    for link in range(int(lib.NVML_NVLINK_MAX_LINKS)):
        try:
            state = lib.nvmlDeviceGetNvLinkState(h, link)
        except lib.NVMLError as e:
            if not links:
                r.unreadable.append(f"GPU {i} NVLink: {e}")
            break  # no (more) links on this GPU
        links.append("active" if state == lib.NVML_FEATURE_ENABLED else "inactive")
    out["nvlink"] = links
    return out


def read_inventory(lib: Any) -> dict[str, Any]:
    """The inventory of an initialised ``pynvml`` (``lib``), as plain JSON-ready data."""
    r = _Reader(lib)
    driver = r.ask("driver version", lib.nvmlSystemGetDriverVersion)
    version = r.ask("NVML version", lib.nvmlSystemGetNVMLVersion)
    count = r.ask("GPU count", lib.nvmlDeviceGetCount)
    gpus = [_gpu(r, i) for i in range(count if isinstance(count, int) and 0 <= count <= 64 else 0)]
    return {"driverVersion": _text(driver) if driver is not None else None,
            "nvmlVersion": _text(version) if version is not None else None,
            "gpuCount": count, "gpus": gpus, "unreadable": r.unreadable}


def summary(inv: dict[str, Any]) -> str:
    """One line for the log: driver, count, and per GPU its bus id and UUID."""
    gpus = "; ".join(f"GPU {g['index']} {g.get('pciBusId')} {g.get('uuid')}" for g in inv["gpus"])
    text = f"driver {inv['driverVersion']}, NVML {inv['nvmlVersion']}, {inv['gpuCount']} GPU(s)"
    text += f": {gpus}" if gpus else ""
    return text + (f"; unreadable: {', '.join(inv['unreadable'])}" if inv["unreadable"] else "")


def render_text(inv: dict[str, Any]) -> str:
    """The inventory for a person (``autoclusters detector inventory``)."""
    lines = [f"driver version: {inv['driverVersion']}", f"NVML version: {inv['nvmlVersion']}",
             f"GPUs: {inv['gpuCount']}"]
    for g in inv["gpus"]:
        lines.append(f"GPU {g['index']}: {g.get('name')} bus {g.get('pciBusId')} uuid {g.get('uuid')}")
        ecc = g.get("eccUncorrected") or {}
        lines.append(f"  uncorrected ECC: volatile {ecc.get('volatile')}, aggregate {ecc.get('aggregate')}")
        lines.append(f"  remapped rows: {g.get('remappedRows')}; retired pages pending: "
                     f"{g.get('retiredPagesPending')}")
        links = g.get("nvlink") or []
        up = sum(1 for s in links if s == "active")
        lines.append(f"  NVLink: {up}/{len(links)} active" + (f" ({', '.join(links)})" if links else ""))
    lines += [f"unreadable: {u}" for u in inv["unreadable"]] or ["unreadable: nothing"]
    return "\n".join(lines)
