"""One node's detector: polls its sources, keeps the window, hands conditions to the writer.

The flow per poll, in order: read every due source (a source that raises is an
unreadable source, never a crash) -> fold each poll into the tracker -> warnings become
events once per boot (through the client layer's ``EventRecorder``) -> the desired
conditions go to the writer, which coalesces them. A poll that raises all the same (a bug of
the agent's own, outside its sources) is its loop's to catch (``detector.node.NodeLoop``, the
simulated fleet), which tells the agent (``poll_failed``) so the node's health condition says so.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from autoclusters.clock import Clock
from autoclusters.detector.conditions import desired_conditions, health_condition, message_for, reason_for
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus
from autoclusters.detector.window import FaultTracker
from autoclusters.detector.writer import ConditionWriter
from autoclusters.faults.catalog import Catalog, Severity
from autoclusters.kube.events import ObjectRef
from autoclusters.names import EVENT_UNKNOWN_CODE, Names

log = logging.getLogger(__name__)


_CODE_LABEL = re.compile(r"\d{1,6}|[A-Za-z][A-Za-z0-9_]{0,63}")


def code_label(code: str) -> str:
    """The metric's ``code`` label: the code itself (Xid numbers have at most 6 digits, the
    other codes are names), anything else ``invalid``, so the label's values stay bounded."""
    return code if _CODE_LABEL.fullmatch(code) else "invalid"


def unknown_code_message(rec: Record) -> str:
    """``GPU 3 reported gpu code 999, which the fault catalog does not list: reported, not repaired
    unless the pool names gpu:999 in spec.repairCodes.``"""
    return (f"{rec.subject} reported {rec.fault_class} code {rec.code}, which the fault catalog does not list: "
            f"reported, not repaired unless the pool names {rec.fault_class}:{rec.code} in spec.repairCodes.")[:1000]


def raised(poll: Poll, codes: frozenset[str]) -> Poll:
    """``poll`` with the records of ``codes`` ("<class>:<code>") made fatal: they raise the fault
    condition. Their catalog action stays what it is (none for an application or software
    bucket), so only a pool that names the code in ``spec.repairCodes`` repairs them."""
    records = tuple(r._replace(severity=Severity.FATAL) if f"{r.fault_class}:{r.code}" in codes else r
                    for r in poll.records)
    return replace(poll, records=records)


class Source(Protocol):
    name: str

    def poll(self) -> Poll: ...

    def state(self) -> SourceState:
        """On, off by configuration, or unavailable and why (asked after each of its polls)."""
        ...


class EventSink(Protocol):
    """What the agent needs of ``kube.events.EventRecorder``."""

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None: ...


@dataclass
class Scheduled:
    """A source and how often to read it (log sources every poll, state sources less often)."""

    source: Source
    interval_s: float = 0.0
    next_at: float = field(default=0.0)


class NodeAgent:
    def __init__(self, node: str, sources: Sequence[Scheduled], *, catalog: Catalog, names: Names,
                 writer: ConditionWriter, events: EventSink | None, clock: Clock, window_s: float,
                 condition_codes: frozenset[str] = frozenset()) -> None:
        self.node = node
        self.sources = list(sources)
        self.catalog = catalog
        self.names = names
        self.writer = writer
        self.events = events
        self.clock = clock
        self.tracker = FaultTracker(window_s=window_s)
        self.condition_codes = condition_codes  # "gpu:13": its warnings raise the condition (AgentConfig)
        self._warned: set[tuple[str, str, str]] = set()
        self._unknown: set[tuple[str, str, str]] = set()
        # (class, code) of faults the catalog does not list, counted once per fault and boot
        # (autoclusters_detector_unknown_codes_total)
        self.unknown_codes: Counter[tuple[str, str]] = Counter()
        self.polled = False
        self.poll_error = ""  # what the last poll raised ("" once a poll gets through)
        self.states: dict[str, SourceState] = {}  # each source's, as of its last poll

    def poll(self) -> None:
        now = self.clock.monotonic()
        for sched in self.sources:
            if now < sched.next_at:
                continue
            sched.next_at = now + sched.interval_s
            try:
                result = sched.source.poll()
            except Exception as e:
                log.exception("source %s on %s failed", sched.source.name, self.node)
                result = Poll(sched.source.name, error=f"{type(e).__name__}: {e}"[:300])
            for rec in result.records:
                if not rec.known:
                    self._report_unknown(rec)
            if self.condition_codes:
                result = raised(result, self.condition_codes)
            for rec in self.tracker.observe(result, now):
                self._warn(rec)
            self._note_state(sched.source)
        self.polled = True
        self.poll_error = ""
        self.publish(now)

    def publish(self, now: float | None = None) -> None:
        """Hands the conditions the tracker implies now to the writer."""
        t = self.clock.monotonic() if now is None else now
        for ctype, state in desired_conditions(self.tracker, t, self.catalog, self.names, self.poll_error,
                                               self.states):
            self.writer.set(self.node, ctype, state)

    def poll_failed(self, error: Exception) -> str:
        """The poll raised ``error`` (a bug of the agent's own, not a source's): the node's health
        condition names it until a poll gets through; the other conditions keep what they said.
        Returns the error as the condition names it."""
        self.poll_error = f"{type(error).__name__}: {error}"[:300]
        self.writer.set(self.node, self.names.detector_health_condition,
                        health_condition(self.tracker.source_errors, self.names, self.poll_error, self.states))
        return self.poll_error

    def _note_state(self, source: Source) -> None:
        """Keeps the source's state; logs it the first time and whenever it changes (one line
        per source at start: none is off in silence)."""
        st = source.state()  # one that raises is the agent's bug: the poll fails, and the loop says so
        if self.states.get(source.name) == st:
            return
        self.states[source.name] = st
        why = f": {st.reason}" if st.reason else ""
        if st.status == SourceStatus.UNAVAILABLE and st.expected:
            log.warning("%s: source %s is unavailable although the node's hardware implies it%s",
                        self.node, source.name, why)
        else:
            log.info("%s: source %s is %s%s", self.node, source.name, st.status, why)

    def _warn(self, rec: Record) -> None:
        if rec.key in self._warned:
            return
        self._warned.add(rec.key)
        if rec.severity == Severity.WARNING and self.events is not None:
            log.info("%s: warning %s", self.node, rec)
            self.events.emit(ObjectRef("Node", self.node), reason_for(rec), message_for(rec), warning=True)
        else:
            log.info("%s: informational %s", self.node, rec)

    def _report_unknown(self, rec: Record) -> None:
        """A code the catalog does not list: an event naming class and code, and the metric;
        its condition (if it is fatal) says "not in the fault catalog" and it is not repaired
        unless the pool names it in ``spec.repairCodes``."""
        if rec.key in self._unknown:
            return
        self._unknown.add(rec.key)
        self.unknown_codes[(str(rec.fault_class), code_label(rec.code))] += 1
        log.warning("%s: %s reported %s code %s, which the fault catalog does not list", self.node, rec.subject,
                    rec.fault_class, rec.code)
        if self.events is not None:
            self.events.emit(ObjectRef("Node", self.node), EVENT_UNKNOWN_CODE, unknown_code_message(rec),
                             warning=True)

    def reboot(self) -> None:
        """The node rebooted: drop its faults; sources read the new boot from its start."""
        log.info("%s rebooted: dropping %d active faults", self.node, len(self.tracker.active))
        self.tracker.reboot()
        self._warned.clear()
        self._unknown.clear()
        for sched in self.sources:
            sched.next_at = 0.0
