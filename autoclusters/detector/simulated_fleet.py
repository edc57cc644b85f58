"""One process serving many simulated (kwok) nodes from a spool directory.

Each node matching the selector gets a ``NodeAgent`` whose sources read that node's
spool (see ``simulated``). A watch on the nodes supplies the reboot signal: when a
node's ``status.nodeInfo.bootID`` changes, its simulated hardware starts a new boot
and its agent drops the faults of the old one. Nodes that disappear are dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoclusters.clock import Clock
from autoclusters.detector.agent import NodeAgent, Scheduled
from autoclusters.detector.config import AgentConfig
from autoclusters.detector.dcgm import DcgmSource
from autoclusters.detector.events import WarningEvents
from autoclusters.detector.infiniband import InfinibandSource
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.kmsg import KernelLogFileSource
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.simulated import SimulatedHardware
from autoclusters.detector.source_records import Poll
from autoclusters.detector.writer import ConditionWriter
from autoclusters.faults.catalog import Catalog
from autoclusters.kube import Kube
from autoclusters.kube.errors import KubeError
from autoclusters.names import Names

log = logging.getLogger(__name__)


class _SkipWhileUnchanged:
    """Repeats a state source's last poll while its simulated hardware has not changed.

    Port state changes in the spool only through ``SimulatedHardware`` (inject, clear,
    reboot), which moves the node's generation; ``dcgm.json`` is watched by its own inode
    and time. One ``stat`` instead of about twenty file reads keeps a fleet of thousands
    of nodes cheap to poll every second.
    """

    def __init__(self, source: Any, stamp: Callable[[], tuple[int, int]]) -> None:
        self.source = source
        self.stamp = stamp
        self.name = source.name
        self._seen: tuple[int, int] | None = None
        self._last: Poll | None = None

    def poll(self) -> Poll:
        gen = self.stamp()
        if self._last is None or gen != self._seen:
            self._seen = gen
            self._last = self.source.poll()
        return self._last


def boot_id(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


class SimulatedFleet:
    def __init__(self, kube: Kube, clock: Clock, catalog: Catalog, names: Names, spool: str | Path,
                 selector: str, config: AgentConfig) -> None:
        self.kube = kube
        self.clock = clock
        self.catalog = catalog
        self.names = names
        self.spool = Path(spool)
        self.selector = selector
        self.config = config
        self.writer = ConditionWriter(kube, clock, config.writer)
        self.events = WarningEvents(kube, clock)
        self.agents: dict[str, NodeAgent] = {}
        self._boots: dict[str, str] = {}
        self._reboots: set[str] = set()
        self._gone: set[str] = set()
        self._lock = threading.Lock()
        self._gpus = GpuIndex.simulated()
        self.synced = threading.Event()

    # --- node discovery --------------------------------------------------------------
    def _seen(self, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        boot = boot_id(node)
        with self._lock:
            old = self._boots.get(name)
            self._boots[name] = boot
            if old is not None and old != boot and boot:
                self._reboots.add(name)

    def _deleted(self, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        with self._lock:
            if name in self._boots:
                del self._boots[name]
                self._gone.add(name)

    def watch_nodes(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                items, rv = self.kube.list_with_version("/api/v1/nodes", label_selector=self.selector)
                names = set()
                for node in items:
                    self._seen(node)
                    names.add(node["metadata"]["name"])
                with self._lock:
                    for gone in set(self._boots) - names:
                        del self._boots[gone]
                        self._gone.add(gone)
                self.synced.set()
                backoff = 1.0
                for event in self.kube.watch("/api/v1/nodes", resource_version=rv, label_selector=self.selector,
                                             timeout_seconds=120):
                    if stop.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind in ("ADDED", "MODIFIED"):
                        self._seen(obj)
                    elif kind == "DELETED":
                        self._deleted(obj)
            except Exception as e:  # noqa: BLE001 - the watch must outlive any one broken stream
                level = logging.WARNING if isinstance(e, KubeError) else logging.ERROR
                log.log(level, "node watch failed (%s); relisting in %.0fs", e, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    # --- agents --------------------------------------------------------------------------
    def _agent(self, name: str) -> NodeAgent:
        hw = SimulatedHardware(self.spool, name)
        hw.ensure()
        interp = KernelLogInterpreter(self.catalog, self._gpus)
        dcgm = DcgmSource(self.catalog, output_file=str(hw.dcgm_json))
        ib = InfinibandSource(self.catalog, self.clock, str(hw.ib_root), self.config.infiniband)
        sources = [
            Scheduled(KernelLogFileSource(str(hw.kmsg), interp), 0.0),
            Scheduled(_SkipWhileUnchanged(dcgm, hw.dcgm_stamp), 0.0),
            Scheduled(_SkipWhileUnchanged(ib, hw.generation), 0.0),
        ]
        return NodeAgent(name, sources, catalog=self.catalog, names=self.names, writer=self.writer,
                         events=self.events, clock=self.clock, window_s=self.config.window_s)

    def agent_list(self) -> list[NodeAgent]:
        """A copy of the agents, safe to read from another thread (metrics)."""
        for _ in range(5):
            try:
                return list(self.agents.values())
            except RuntimeError:  # the poll thread added or removed a node meanwhile
                continue
        return []

    def poll_once(self) -> None:
        with self._lock:
            boots = dict(self._boots)
            reboots, self._reboots = self._reboots, set()
            gone, self._gone = self._gone, set()
        for name in gone:
            self.agents.pop(name, None)
            self.writer.forget(name)
        for name in boots:
            try:
                agent = self.agents.get(name)
                if agent is None:
                    agent = self.agents[name] = self._agent(name)
                elif name in reboots:
                    SimulatedHardware(self.spool, name).reboot(self.catalog)
                    agent.reboot()
                agent.poll()
            except Exception:
                log.exception("polling simulated node %s failed", name)

    def run(self, stop: threading.Event) -> None:
        threads = [threading.Thread(target=self.watch_nodes, args=(stop,), name="node-watch", daemon=True),
                   threading.Thread(target=self.writer.run, args=(stop,), name="writer", daemon=True)]
        for t in threads:
            t.start()
        self.synced.wait(30)
        while not stop.is_set():
            self.poll_once()
            stop.wait(self.config.poll_s)
        self.writer.close()
        self.events.close()
