"""The agent on a real GPU node (the DaemonSet pod): real sources, one node.

Every source is in the agent and says its state (``SourceState``): on; off by
configuration (``--no-nvml``, no ``--dcgm-host``, no ``--dcgm-exporter-url``); or
unavailable and why (no NVML bindings or library, no ``dcgmi`` in the image, no
``/sys/class/infiniband``), expected where the node's hardware implies it (NVML on a node
whose driver lists GPUs), which the health condition then reports. The GPU index for Xid
lines comes from NVML once it answers, else from the driver's ``/proc`` listing, else from
the configured map. A reboot restarts the pod, and the kernel log then begins anew, so
the faults of the previous boot are gone with it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from autoclusters.api import DEFAULT_KERNEL_LOG_SOURCE, KernelLogSource
from autoclusters.clock import Clock
from autoclusters.deploy.nvml_reach import DEFAULT_HOST_ROOT, DEFAULT_SEARCH
from autoclusters.detector.agent import NodeAgent, Scheduled
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.dcgm import DEFAULT_COMMAND, DcgmSource
from autoclusters.detector.dcgm_exporter import DcgmExporterSource, ExporterConfig
from autoclusters.detector.infiniband import InfinibandSource
from autoclusters.detector.journal import JournalSource
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.kmsg import DevKmsgSource, KernelLogFileSource
from autoclusters.detector.nvml import NvmlSource, driver_lists_gpus, load_library
from autoclusters.detector.nvml_library import preload
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import Poll, SourceState
from autoclusters.detector.writer import ConditionWriter, warning_recorder
from autoclusters.faults.catalog import Catalog
from autoclusters.kube import Kube, KubeError
from autoclusters.kube.events import EventRecorder
from autoclusters.names import Names
from autoclusters.repeats import RepeatedErrors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodePaths:
    kmsg: str = "/dev/kmsg"
    kernel_log_file: str | None = None  # read a file (journald export, syslog file) instead of /dev/kmsg
    kernel_log_source: KernelLogSource | None = None  # None: FILE when kernel_log_file is set, else the default
    journal_root: str = "/"  # the OS root whose var/log/journal and run/log/journal hold the host's journal
    infiniband: str = "/sys/class/infiniband"
    nvidia_proc: str = "/proc/driver/nvidia/gpus"
    dcgm_command: tuple[str, ...] = DEFAULT_COMMAND
    dcgm_host: str | None = None  # the DCGM hostengine dcgmi asks (``--host``); None: the DCGM source is off
    dcgm_exporter_url: str = ""  # the node's dcgm-exporter metrics page; "": that source is off
    gpu_map: dict[str, int] = field(default_factory=dict)
    accept_user_kmsg: bool = False  # count lines written to /dev/kmsg from user space (fault drills)
    use_nvml: bool = True
    # where libnvidia-ml.so.1 is searched (deploy/nvml_reach.py), host directories seen under host_root
    nvml_search: tuple[str, ...] = DEFAULT_SEARCH
    host_root: str = DEFAULT_HOST_ROOT

    @property
    def log_source(self) -> KernelLogSource:
        if self.kernel_log_source is not None:
            return self.kernel_log_source
        return KernelLogSource.FILE if self.kernel_log_file else DEFAULT_KERNEL_LOG_SOURCE


class _IndexFollowingNvml:
    """Wraps the NVML source so the kernel log uses NVML's PCI -> index map once known."""

    def __init__(self, nvml: NvmlSource, interp: KernelLogInterpreter) -> None:
        self.nvml = nvml
        self.interp = interp
        self.name = nvml.name

    def state(self) -> SourceState:
        return self.nvml.state()

    def poll(self) -> Poll:
        result = self.nvml.poll()
        if len(self.nvml.gpu_index()):
            self.interp.gpus = self.nvml.gpu_index()
        return result


GPU_RESOURCE = "nvidia.com/gpu"  # what the NVIDIA device plugin advertises


def advertises_gpus(kube: Kube, node: str) -> bool:
    """The node's capacity names ``nvidia.com/gpu`` (False when the node cannot be read)."""
    try:
        capacity = (kube.get_node(node).get("status") or {}).get("capacity") or {}
    except KubeError as e:
        log.warning("%s: cannot read the node's capacity (%s); NVML is expected only if the driver lists GPUs",
                    node, e)
        return False
    return str(capacity.get(GPU_RESOURCE, "0")) not in ("", "0")


def nvml_source(catalog: Catalog, paths: NodePaths, *, advertised: bool) -> NvmlSource:
    """The NVML source of a node (always there, so that it reports its state: off, unavailable or on)."""
    lib, found = load_library(paths.nvml_search, paths.host_root) if paths.use_nvml else (None, None)
    return NvmlSource(lib, catalog, expect_gpus=lambda: advertised or driver_lists_gpus(paths.nvidia_proc),
                      found=found, enabled=paths.use_nvml,
                      locate=lambda: preload(paths.nvml_search, paths.host_root))


def kernel_log_source(paths: NodePaths, interp: KernelLogInterpreter
                      ) -> DevKmsgSource | JournalSource | KernelLogFileSource:
    """The one kernel log source the configuration chose (``/dev/kmsg`` by default)."""
    if paths.log_source == KernelLogSource.JOURNAL:
        return JournalSource(interp, paths.journal_root, name=str(KernelLogSource.JOURNAL))
    if paths.log_source == KernelLogSource.FILE:
        if not paths.kernel_log_file:
            raise ValueError("the kernel log source 'file' needs the file's path")
        return KernelLogFileSource(paths.kernel_log_file, interp, name=str(KernelLogSource.FILE))
    return DevKmsgSource(interp, paths.kmsg, name=str(KernelLogSource.KMSG))


def build_agent(node: str, kube: Kube, clock: Clock, catalog: Catalog, names: Names, config: AgentConfig,
                paths: NodePaths) -> tuple[NodeAgent, ConditionWriter, EventRecorder]:
    gpus = GpuIndex(paths.gpu_map) if paths.gpu_map else GpuIndex.from_proc(paths.nvidia_proc)
    interp = KernelLogInterpreter(catalog, gpus, source=str(paths.log_source),
                                  accept_user_lines=paths.accept_user_kmsg)
    sources: list[Scheduled] = []
    nvml = nvml_source(catalog, paths, advertised=advertises_gpus(kube, node))
    state = nvml.state()
    log.info("NVML source: %s%s%s", state.status, f" ({state.reason})" if state.reason else "",
             "; the node has GPUs" if state.expected else "")
    sources.append(Scheduled(_IndexFollowingNvml(nvml, interp), config.snapshot_poll_s))
    sources.append(Scheduled(kernel_log_source(paths, interp), 0.0))
    sources.append(Scheduled(DcgmSource(catalog, command=paths.dcgm_command, host=paths.dcgm_host),
                             config.snapshot_poll_s))
    sources.append(Scheduled(DcgmExporterSource(catalog, lambda: interp.gpus,
                                                ExporterConfig(url=paths.dcgm_exporter_url)),
                             config.snapshot_poll_s))
    sources.append(Scheduled(InfinibandSource(catalog, clock, paths.infiniband, config.infiniband),
                             config.snapshot_poll_s))
    writer = ConditionWriter(kube, clock, config.writer)
    events = warning_recorder(kube, clock, instance=node)
    agent = NodeAgent(node, sources, catalog=catalog, names=names, writer=writer, events=events, clock=clock,
                      window_s=config.window_s, condition_codes=config.condition_codes)
    return agent, writer, events


class NodeLoop:
    """The agent's loop on its node: a poll every ``poll_s``, the writer on its own thread.

    A source that raises is already that source's error (the health condition names it). A
    poll that raises all the same (a bug of the agent's own: its tracker, its warnings, its
    conditions) never ends the loop: it is logged (with its traceback when the error is new, in
    one line while it repeats), counted (``poll_errors``:
    ``autoclusters_detector_poll_errors_total``), reported on the node (the health condition
    turns True, reason ``DetectorPollFailed``, until a poll gets through), and the next poll
    comes at its time."""

    def __init__(self, agent: NodeAgent, writer: ConditionWriter, events: EventRecorder,
                 config: AgentConfig) -> None:
        self.agent = agent
        self.writer = writer
        self.events = events
        self.config = config
        self.poll_errors = 0
        self._bugs = RepeatedErrors()  # one key, "": the poll's

    def poll_once(self) -> None:
        try:
            self.agent.poll()
        except Exception as e:  # the agent's own bug: this poll's alone, the loop goes on
            self.poll_errors += 1
            if self._bugs.is_new("", e):
                log.exception("%s: the poll failed; polling again in %.1fs", self.agent.node, self.config.poll_s)
            else:
                log.warning("%s: the poll failed again: %r", self.agent.node, e)
            try:
                self.agent.poll_failed(e)
            except Exception:
                log.exception("%s: cannot report the failed poll on the node", self.agent.node)
        else:
            self._bugs.succeeded("")

    def run(self, stop: threading.Event) -> None:
        t = threading.Thread(target=self.writer.run, args=(stop,), name="writer", daemon=True)
        t.start()
        while not stop.is_set():
            self.poll_once()
            stop.wait(self.config.poll_s)
        self.writer.close()
        self.events.flush()
