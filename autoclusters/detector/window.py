"""Which faults are active, and which have stayed active long enough to report.

Three guarantees, in this order:

1. A fatal fault is reported only after it has stayed active for the persistence window
   (60 s by default); one that recovers inside the window is never reported.
2. A fault stops being active only on a real recovery signal: the node rebooted (its boot
   id changed), or a source that reads current state says the part is healthy again.
   Silence from a log source is not recovery.
3. A source that cannot be read changes nothing: its faults stay as they were, and its
   failure is kept apart as the agent's own health problem.

Pure logic: time comes in as a monotonic ``now`` argument; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoclusters import api
from autoclusters.detector.source_records import Poll, Record
from autoclusters.faults.catalog import Severity


@dataclass
class Active:
    record: Record
    first_seen: float
    last_seen: float


@dataclass
class FaultTracker:
    window_s: float = api.PERSISTENCE_WINDOW_SECONDS
    active: dict[tuple[str, str, str], Active] = field(default_factory=dict)
    source_errors: dict[str, str] = field(default_factory=dict)

    def observe(self, poll: Poll, now: float) -> list[Record]:
        """Folds one poll in; returns the warning/info records it carried (events, not faults)."""
        if not poll.ok:
            self.source_errors[poll.source] = poll.error or "unreadable"
            return []
        self.source_errors.pop(poll.source, None)
        others: list[Record] = []
        seen: set[tuple[str, str, str]] = set()
        for rec in poll.records:
            if rec.severity != Severity.FATAL:
                others.append(rec)
                continue
            seen.add(rec.key)
            cur = self.active.get(rec.key)
            if cur is None:
                self.active[rec.key] = Active(rec, now, now)
            else:
                cur.last_seen = now
                cur.record = rec
        if poll.snapshot:
            for key in [k for k, a in self.active.items() if a.record.source == poll.source and k not in seen]:
                del self.active[key]  # the source reads current state and says this part is healthy
        return others

    def reboot(self) -> None:
        """The node rebooted: the driver state behind every active fault is gone."""
        self.active.clear()

    def confirmed(self, now: float) -> list[Active]:
        """Faults active for at least the window, oldest first."""
        out = [a for a in self.active.values() if now - a.first_seen >= self.window_s]
        return sorted(out, key=lambda a: (a.first_seen, a.record.key))

    def pending(self, now: float) -> list[Active]:
        """Faults still inside the window."""
        return [a for a in self.active.values() if now - a.first_seen < self.window_s]

