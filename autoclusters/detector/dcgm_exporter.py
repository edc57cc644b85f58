"""DCGM's view of the node's GPUs, read from the node's ``dcgm-exporter`` metrics page.

The GPU Operator runs dcgm-exporter on every GPU node (port 9400). Its page is Prometheus
text; every GPU's series carry the labels ``gpu`` (DCGM's GPU id), ``UUID``,
``pci_bus_id`` (``00000000:07:00.0``), ``device`` (``nvidia0``), ``modelName`` and
``Hostname`` (NVIDIA/dcgm-exporter, ``etc/default-counters.csv`` and the pages its tests
read). The fields read, and what makes each a fault:

* ``DCGM_FI_DEV_XID_ERRORS`` (gauge, default CSV: "Value of the last XID error
  encountered"): a value above 0 is Xid <value> of the GPU class, so it is the same fault
  as the kernel log's line for that GPU (class, code and subject alike) and the catalog
  says what it weighs.
* ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (gauge, default CSV): 1 is ``DCGM_FR_ROW_REMAP_FAILURE``.
* ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (volatile double-bit ECC errors since the driver
  loaded; commented out in the default CSV): above 0 is ``DCGM_FR_VOLATILE_DBE_DETECTED``,
  by value like NVML's volatile count, since a reset clears it.
* ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER`` (counter, default CSV): a rise of more than its
  threshold since the source started is ``DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION``.
* ``DCGM_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL`` (counters,
  commented out in the default CSV): a rise of more than its threshold since the source
  started is ``DCGM_FR_NVLINK_ERROR_THRESHOLD``.

The codes are DCGM's own failure names, so a fault the exporter shows is the fault
``dcgmi health`` names for the same incident. A counter that falls (the driver reloaded)
starts its count again from the new value. A GPU is told by its PCI bus id, mapped
through the node's ``GpuIndex`` (NVML's, else the driver's listing) to the "GPU N" the
other sources use; without a bus id by its ``gpu`` label. An exporter that does not
answer, or a page that does not parse, is this source's read error, never a GPU fault.

A snapshot source: each page holds the values of now. The page is parsed with
``prometheus_client``'s text parser, imported at the first page read, so an agent without
an exporter does not load the package (measured: 0.6 MiB of RSS on top of the agent's own
modules, whose standard library it mostly shares; 14 MiB in a bare interpreter). A page of
about 300 series (52 KB: 38 fields of up to eight GPUs) takes about 37 ms to parse here.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from autoclusters.detector.pci import GpuIndex, normalize
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus
from autoclusters.faults.catalog import Catalog, FaultClass

XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
NVLINK_ERRORS = ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
# A gauge field, and the DCGM failure code a value above 0 means.
GAUGE_CODES = {ROW_REMAP_FAILURE: "DCGM_FR_ROW_REMAP_FAILURE", DBE_VOLATILE: "DCGM_FR_VOLATILE_DBE_DETECTED"}
# A counter field, and the DCGM failure code a rise over its threshold means.
COUNTER_CODES = {PCIE_REPLAY: "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION",
                 **{f: "DCGM_FR_NVLINK_ERROR_THRESHOLD" for f in NVLINK_ERRORS}}
MAX_PAGE = 16 << 20


@dataclass(frozen=True)
class ExporterConfig:
    url: str = ""  # "" : not configured, the source is off
    timeout_s: float = 5.0
    # The rise since the source started that makes a counter a fault.
    counter_thresholds: Mapping[str, int] = field(
        default_factory=lambda: {PCIE_REPLAY: 100, **{f: 100 for f in NVLINK_ERRORS}})


def fetch(url: str, timeout_s: float) -> str:
    """The page at ``url``; raises OSError (``URLError`` is one) when the exporter does not answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        body: bytes = resp.read(MAX_PAGE + 1)
    if len(body) > MAX_PAGE:
        raise OSError(f"the page is larger than {MAX_PAGE >> 20} MiB")
    return body.decode("utf-8", "replace")


def samples(text: str) -> Iterable[tuple[str, dict[str, str], float]]:
    """``(name, labels, value)`` of every sample of the fields read; raises ValueError on a bad page."""
    from prometheus_client.parser import text_string_to_metric_families  # here: only a configured source pays

    wanted = {XID, *GAUGE_CODES, *COUNTER_CODES}
    for family in text_string_to_metric_families(text):
        # the family's name is the field's: the parser renames a counter's samples <name>_total
        if family.name in wanted:
            for s in family.samples:
                yield family.name, s.labels, s.value


class DcgmExporterSource:
    name = "dcgm-exporter"

    def __init__(self, catalog: Catalog, gpus: Callable[[], GpuIndex], config: ExporterConfig,
                 read: Callable[[str, float], str] = fetch) -> None:
        """``gpus``: the node's bus id -> index map as it is now (NVML's once it answers)."""
        self.catalog = catalog
        self.gpus = gpus
        self.config = config
        self.read = read
        self._baseline: dict[tuple[str, str], float] = {}

    def state(self) -> SourceState:
        if not self.config.url:
            return SourceState(SourceStatus.OFF, "no dcgm-exporter URL configured (--dcgm-exporter-url)")
        return SourceState(SourceStatus.ON)

    def reset(self) -> None:
        """Forget the counters' starting values (the node rebooted)."""
        self._baseline = {}

    def _subject(self, labels: dict[str, str]) -> str:
        bus, gpu = labels.get("pci_bus_id", ""), labels.get("gpu", "")
        gpus = self.gpus()
        if bus and gpus.index_of(bus) is not None:
            return gpus.subject(bus)  # "GPU 3", as NVML and the kernel log say it
        if gpu.isdigit() and not len(gpus):
            return f"GPU {gpu}"  # no map on this node: DCGM numbers the GPUs as NVML does
        if normalize(bus) is not None:
            return gpus.subject(bus)  # "GPU PCI:0000:3b:00", as the kernel log says an unmapped GPU
        return f"GPU {gpu}" if gpu.isdigit() else f"GPU {labels.get('UUID') or '?'}"

    def _record(self, fault_class: FaultClass, code: str, subject: str, detail: str) -> Record:
        entry = self.catalog.entry_or_unknown(fault_class, code)
        return Record(self.name, fault_class, code, subject, entry.severity, entry.name,
                      self.catalog.lookup(fault_class, code) is not None, detail)

    def poll(self) -> Poll:
        if self.state().status != SourceStatus.ON:
            return Poll(self.name, snapshot=True)
        try:
            text = self.read(self.config.url, self.config.timeout_s)
        except (OSError, ValueError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            return Poll(self.name, error=f"cannot read dcgm-exporter at {self.config.url}: {reason}"[:300])
        try:
            found = list(samples(text))
        except ValueError as e:
            return Poll(self.name, error=f"cannot parse dcgm-exporter's page: {str(e)[:200]}")
        records: dict[tuple[str, str, str], Record] = {}
        for name, labels, value in found:
            subject = self._subject(labels)
            rec = self._judge(name, subject, value)
            if rec is not None:
                records.setdefault(rec.key, rec)
        return Poll(self.name, tuple(records.values()), snapshot=True)

    def _judge(self, name: str, subject: str, value: float) -> Record | None:
        if name == XID:
            if value >= 1 and value == int(value):
                return self._record(FaultClass.GPU, str(int(value)), subject, f"{XID} is {int(value)}")
            return None
        if name in GAUGE_CODES:
            if value > 0:
                return self._record(FaultClass.DCGM, GAUGE_CODES[name], subject, f"{name} is {value:g}")
            return None
        key = (name, subject)
        start = self._baseline.get(key)
        if start is None or value < start:
            self._baseline[key] = start = value  # first seen, or the counter started over
        rise = value - start
        limit = self.config.counter_thresholds.get(name)
        if limit is not None and rise > limit:
            return self._record(FaultClass.DCGM, COUNTER_CODES[name], subject,
                                f"{name} rose by {rise:g} (threshold {limit})")
        return None
