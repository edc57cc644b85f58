"""One process serving many simulated (kwok) nodes from a spool directory.

Each node matching the selector gets a ``NodeAgent`` whose sources read that node's
spool (see ``sim.hardware``). An informer on the nodes (``kube.informer``: the project's one
list-watch and its error policy) supplies the reboot signal: when a node's
``status.nodeInfo.bootID`` changes, its simulated hardware starts a new boot and its agent
drops the faults of the old one. Nodes that disappear are dropped. The informer keeps
only each node's name, resourceVersion and boot id, so thousands of nodes cost little.

A node whose handling raises (the informer's handler, or its poll) is that node's error
alone: logged with its name and counted, in the informer's ``handler_errors`` and the fleet's
``poll_errors``, which the metrics endpoint exports (``autoclusters_informer_handler_errors_total``,
``autoclusters_detector_poll_errors_total``); a poll that raises is also reported on the node, as
the agent on a real node reports it (``detector.node.NodeLoop``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoclusters.clock import Clock
from autoclusters.detector.agent import NodeAgent, Scheduled, Source
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.dcgm import DcgmSource
from autoclusters.detector.infiniband import InfinibandSource
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.kmsg import KernelLogFileSource
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import Poll, SourceState
from autoclusters.detector.writer import ConditionWriter, warning_recorder
from autoclusters.faults.catalog import Catalog
from autoclusters.kube import Kube
from autoclusters.kube.informer import Informer
from autoclusters.names import Names
from autoclusters.repeats import RepeatedErrors
from autoclusters.sim.hardware import SimulatedHardware

log = logging.getLogger(__name__)


class _SkipWhileUnchanged:
    """Repeats a state source's last poll while its simulated hardware has not changed.

    Port state changes in the spool only through ``SimulatedHardware`` (inject, clear,
    reboot), which moves the node's generation; ``dcgm.json`` is watched by its own inode
    and time. One ``stat`` instead of about twenty file reads keeps a fleet of thousands
    of nodes cheap to poll every second.
    """

    def __init__(self, source: Source, stamp: Callable[[], tuple[int, int]]) -> None:
        self.source = source
        self.stamp = stamp
        self.name = source.name
        self._seen: tuple[int, int] | None = None
        self._last: Poll | None = None

    def state(self) -> SourceState:
        return self.source.state()

    def poll(self) -> Poll:
        gen = self.stamp()
        if self._last is None or gen != self._seen:
            self._seen = gen
            self._last = self.source.poll()
        return self._last


def boot_id(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def _boot_only(node: dict[str, Any]) -> dict[str, Any]:
    """What the fleet keeps of a node: its name, its version and its boot id."""
    meta = node.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion", "")},
            "status": {"nodeInfo": {"bootID": boot_id(node)}}}


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
        self.events = warning_recorder(kube, clock)
        self.agents: dict[str, NodeAgent] = {}
        self._reboots: set[str] = set()
        self._gone: set[str] = set()
        self._lock = threading.Lock()
        self._gpus = GpuIndex.simulated()
        self.poll_errors = 0  # polls of one node that raised (logged with the node's name; polled again next round)
        self._bugs = RepeatedErrors()  # per node: its traceback once, one line while the same error repeats
        self.nodes = Informer(kube, "/api/v1/nodes", self.on_node, label_selector=selector, watch_timeout=120,
                              name="simulated-nodes", transform=_boot_only)

    # --- node discovery --------------------------------------------------------------
    def on_node(self, name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """The informer's handler: a new boot id is a reboot, a node gone is dropped at the next poll."""
        with self._lock:
            if new is None:
                self._gone.add(name)
                self._reboots.discard(name)
            elif old is not None and boot_id(new) and boot_id(old) != boot_id(new):
                self._reboots.add(name)

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
                         events=self.events, clock=self.clock, window_s=self.config.window_s,
                         condition_codes=self.config.condition_codes)

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
            reboots, self._reboots = self._reboots, set()
            gone, self._gone = self._gone, set()
        for name in gone:
            self.agents.pop(name, None)
            self.writer.forget(name)
        names = sorted(n["metadata"]["name"] for n in self.nodes.items())
        self._bugs.keep_only(names)
        for name in names:
            agent: NodeAgent | None = None
            try:
                agent = self.agents.get(name)
                if agent is None:
                    agent = self.agents[name] = self._agent(name)
                elif name in reboots:
                    SimulatedHardware(self.spool, name).reboot(self.catalog)
                    agent.reboot()
                agent.poll()
            except Exception as e:  # this node's error alone: the others are polled, it is polled again next round
                self.poll_errors += 1
                if self._bugs.is_new(name, e):
                    log.exception("polling simulated node %s failed", name)
                else:
                    log.warning("polling simulated node %s failed again: %r", name, e)
                if agent is not None:  # reported on the node as the agent on a real node does (NodeLoop)
                    try:
                        agent.poll_failed(e)
                    except Exception:
                        log.exception("cannot report the failed poll on simulated node %s", name)
            else:
                self._bugs.succeeded(name)

    def run(self, stop: threading.Event) -> None:
        self.nodes.start()
        threading.Thread(target=self.writer.run, args=(stop,), name="writer", daemon=True).start()
        self.nodes.synced.wait(30)
        while not stop.is_set():
            self.poll_once()
            stop.wait(self.config.poll_s)
        self.nodes.stop()
        self.writer.close()
        self.events.flush()
