"""GPU health read through NVML (NVIDIA's ``nvidia-ml-py`` bindings, imported if present).

A snapshot source: each poll asks every GPU for the conditions below and reports those
that hold now, so a GPU that answers healthy again clears its fault.

* ``GPU_LOST``: NVML answers ``GPU_IS_LOST`` for the device.
* ``VOLATILE_UNCORRECTABLE_ECC``: uncorrected ECC errors since the driver loaded.
* ``ROW_REMAP_FAILURE`` / ``ROW_REMAP_PENDING``: from the remapped-rows query.
* ``RETIRED_PAGES_PENDING``: pages waiting to be retired at the next reset.
* ``NVLINK_DOWN``: an NVLink link that was active at the first poll is not active now.

Its state (``state()``): on once NVML answers; off when configuration turns it off
(``--no-nvml``, the stack's ``nvml.enabled: false``); unavailable, with the reason, when the
bindings are not installed, no ``libnvidia-ml.so.1`` is in reach (every place searched is
named) or NVML cannot start (no driver loaded). ``expected`` says the node has GPUs (the
driver lists them, or the node advertises ``nvidia.com/gpu``), so that unavailable is a blind
spot rather than a node without GPUs.

Odd answers are not faults: a query the GPU does not support is skipped, a value of the
wrong type is ignored. Any other NVML error makes the whole poll an error, which the
agent reports as its own health problem and never as a GPU fault.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from autoclusters.deploy.nvml_reach import DEFAULT_HOST_ROOT, DEFAULT_SEARCH
from autoclusters.detector.nvml_inventory import read_inventory, summary
from autoclusters.detector.nvml_library import Found, preload
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus
from autoclusters.faults.catalog import Catalog, FaultClass

log = logging.getLogger(__name__)

_GPU_IS_LOST = 15
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_LIBRARY_NOT_FOUND = 12
_DRIVER_NOT_LOADED = 9


NO_BINDINGS = "the NVML bindings (nvidia-ml-py) are not installed"
TURNED_OFF = "turned off by configuration (--no-nvml)"


def load_library(search: tuple[str, ...] = DEFAULT_SEARCH, host_root: str = DEFAULT_HOST_ROOT
                 ) -> tuple[Any | None, Found | None]:
    """The ``pynvml`` module (None when the bindings are not installed) and where the driver's
    library was found for it (``nvml_library.preload``: ``search`` under ``host_root``)."""
    try:
        import pynvml
    except ImportError:
        return None, None
    return pynvml, preload(search, host_root)


def _text(value: Any) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    name = "nvml"

    def __init__(self, lib: Any | None, catalog: Catalog, *, expect_gpus: bool | Callable[[], bool],
                 found: Found | None = None,
                 locate: Callable[[], Found] | None = None, enabled: bool = True) -> None:
        """``expect_gpus``: the node has NVIDIA GPUs, so an NVML that cannot start is a problem
        (a callable is asked each time: a driver loaded after the detector started lists them).
        ``lib`` None: no bindings; ``found``: where the library was searched for them, and
        ``locate`` searches again; ``enabled`` False: turned off by configuration (the source
        then reads nothing)."""
        self.lib: Any = lib  # pynvml, or None
        self.catalog = catalog
        self._expect = expect_gpus if callable(expect_gpus) else (lambda: bool(expect_gpus))
        self.found = found
        self.locate = locate
        self.enabled = enabled
        self.started = False
        self.off = not enabled or lib is None  # for good: turned off, or no bindings
        self.absent = TURNED_OFF if not enabled else NO_BINDINGS if lib is None else ""  # why it is not on
        self.inventory: dict[str, Any] | None = None
        self._tried = False
        self._links_up: dict[int, set[int]] | None = None
        self._gpus = GpuIndex()

    @property
    def expect_gpus(self) -> bool:
        return self._expect()

    def _code(self, err: Exception) -> int | None:
        value = getattr(err, "value", None)
        return value if isinstance(value, int) else None

    def start(self) -> str | None:
        """Initialises NVML; returns an error text, or None when started or legitimately absent.

        Until NVML starts, every poll tries again (and searches for the library again when it
        was not found): the GPU Operator's driver container may come up after the detector."""
        if self.started or self.off:
            return None
        self._tried = True
        if self.found is not None and self.found.path is None and self.locate is not None:
            self.found = self.locate()
            if self.found.path is None:
                self._unavailable(self.found.describe())
                return None
        try:
            self.lib.nvmlInit()
        except self.lib.NVMLError as e:
            code = self._code(e)
            # No libnvidia-ml in reach (not mounted into this container): the source is absent, not broken.
            # No driver is only fine on a node without GPUs; where the driver lists GPUs it is a failure.
            if code == _LIBRARY_NOT_FOUND or (code == _DRIVER_NOT_LOADED and not self.expect_gpus):
                self._unavailable(self.found.describe() if code == _LIBRARY_NOT_FOUND and self.found
                                  else f"NVML init failed: {e}")
                return None
            self.absent = f"NVML init failed: {e}"
            return self.absent
        self.started = True
        self.absent = ""
        self.inventory = read_inventory(self.lib)
        where = self.found.describe() if self.found else "libnvidia-ml.so.1"
        log.info("NVML started (%s): %s", where, summary(self.inventory))
        return None

    def _unavailable(self, reason: str) -> None:
        if reason != self.absent:
            log.info("NVML not available on this node (%s); trying again at every poll", reason)
        self.absent = reason

    def state(self) -> SourceState:
        """On, off by configuration, or unavailable and why, as of the last poll. Asked before
        the first poll, it starts NVML (the agent asks once at start); after that it only reads
        what the polls found, so another thread (metrics) may ask at any time."""
        if not self.enabled:
            return SourceState(SourceStatus.OFF, self.absent, self.expect_gpus)
        if not self._tried and not self.off:
            self.start()
        if self.started:
            return SourceState(SourceStatus.ON, "", self.expect_gpus)
        return SourceState(SourceStatus.UNAVAILABLE, self.absent, self.expect_gpus)

    def gpu_index(self) -> GpuIndex:
        return self._gpus

    def _record(self, code: str, index: int, detail: str = "") -> Record:
        entry = self.catalog.entry_or_unknown(FaultClass.GPU, code)
        return Record(self.name, FaultClass.GPU, code, f"GPU {index}", entry.severity, entry.name,
                      self.catalog.lookup(FaultClass.GPU, code) is not None, detail)

    def _ask(self, fn: Any, *args: Any) -> Any:
        """The answer, or None when the GPU does not support the query."""
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            if self._code(e) in (_NOT_SUPPORTED, _INVALID_ARGUMENT):
                return None
            raise

    def poll(self) -> Poll:
        err = self.start()
        if err:
            return Poll(self.name, error=err)
        if not self.started:
            return Poll(self.name, snapshot=True)
        lib = self.lib
        records: list[Record] = []
        try:
            count = lib.nvmlDeviceGetCount()
            if not isinstance(count, int) or count < 0 or count > 64:
                return Poll(self.name, error=f"NVML returned an implausible GPU count {count!r}")
            first = self._links_up is None
            links_up = self._links_up if self._links_up is not None else {}
            buses: dict[str, int] = {}
            for i in range(count):
                try:
                    h = lib.nvmlDeviceGetHandleByIndex(i)
                    pci = self._ask(lib.nvmlDeviceGetPciInfo, h)
                except lib.NVMLError as e:
                    if self._code(e) == _GPU_IS_LOST:
                        records.append(self._record("GPU_LOST", i))
                        continue
                    raise
                if pci is not None and hasattr(pci, "busId"):
                    buses[_text(pci.busId)] = i
                records.extend(self._gpu(h, i, links_up, first))
            if buses:
                self._gpus = GpuIndex(buses)
            self._links_up = links_up
        except lib.NVMLError as e:
            if self._code(e) == _GPU_IS_LOST:
                return Poll(self.name, tuple(records), snapshot=False)  # partial: do not clear others
            return Poll(self.name, error=f"NVML query failed: {e}")
        return Poll(self.name, tuple(records), snapshot=True)

    def _gpu(self, h: Any, i: int, links_up: dict[int, set[int]], first: bool) -> list[Record]:
        lib = self.lib
        out: list[Record] = []
        try:
            ecc = self._ask(lib.nvmlDeviceGetTotalEccErrors, h, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            lib.NVML_VOLATILE_ECC)
            if isinstance(ecc, int) and ecc > 0:
                out.append(self._record("VOLATILE_UNCORRECTABLE_ECC", i, f"{ecc} uncorrected ECC errors"))
            rows = self._ask(lib.nvmlDeviceGetRemappedRows, h)
            if isinstance(rows, tuple | list) and len(rows) >= 4:
                if rows[3] is True or rows[3] == 1:
                    out.append(self._record("ROW_REMAP_FAILURE", i))
                elif rows[2] is True or rows[2] == 1:
                    out.append(self._record("ROW_REMAP_PENDING", i))
            pending = self._ask(lib.nvmlDeviceGetRetiredPagesPendingStatus, h)
            if pending == lib.NVML_FEATURE_ENABLED:
                out.append(self._record("RETIRED_PAGES_PENDING", i))
            up_now: set[int] = set()
            for link in range(int(lib.NVML_NVLINK_MAX_LINKS)):
                state = self._ask(lib.nvmlDeviceGetNvLinkState, h, link)
                if state is None:
                    break  # no (more) links on this GPU
                if state == lib.NVML_FEATURE_ENABLED:
                    up_now.add(link)
            if first:
                links_up[i] = up_now
            down = sorted(links_up.get(i, set()) - up_now)
            if down:
                out.append(self._record("NVLINK_DOWN", i, f"links {down} not active"))
        except lib.NVMLError as e:
            if self._code(e) == _GPU_IS_LOST:
                return [self._record("GPU_LOST", i)]
            raise
        return out

    def close(self) -> None:
        if self.started and self.lib is not None:
            with contextlib.suppress(self.lib.NVMLError):
                self.lib.nvmlShutdown()
            self.started = False


def driver_lists_gpus(nvidia_proc: str) -> bool:
    """The loaded driver lists GPUs in ``/proc/driver/nvidia/gpus`` (one directory per GPU)."""
    return os.path.isdir(nvidia_proc) and bool(os.listdir(nvidia_proc))


def read_once(catalog: Catalog, *, search: tuple[str, ...] = DEFAULT_SEARCH, host_root: str = DEFAULT_HOST_ROOT,
              expect_gpus: bool = False) -> dict[str, Any]:
    """The source started once, its state, its inventory and one poll, as JSON-ready data
    (``autoclusters detector inventory``, ``tools/gpu-check.sh``)."""
    lib, found = load_library(search, host_root)
    src = NvmlSource(lib, catalog, expect_gpus=expect_gpus, found=found)  # once: no search again
    try:
        state = src.state()
        poll = src.poll()
        return {
            "state": {"status": str(state.status), "reason": state.reason, "expected": state.expected},
            "library": found.describe() if found else NO_BINDINGS,
            "inventory": src.inventory,
            "poll": {"error": poll.error, "records": [
                {"code": r.code, "subject": r.subject, "severity": str(r.severity), "name": r.name,
                 "detail": r.detail} for r in poll.records]},
        }
    finally:
        src.close()
