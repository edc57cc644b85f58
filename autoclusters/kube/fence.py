"""Write fencing: a replica that may have lost its lease writes nothing.

Leader election (:mod:`autoclusters.kube.leader`) keeps two replicas from both *deciding* to
act; the fence keeps a replica that was paused (a GC stop, a frozen VM, SIGSTOP) or cut off
from the API server from *writing* on a decision it took while it still led. One
:class:`LeaseFence` per controller is installed on its client (``Kube.fenced``), and the
client asks it before every request that is not a read (``Kube.request``: node patches,
evictions, ``Remediation`` records, events, secrets, everything), and the actuator asks it
before every provider action (a provider may talk to a backend of its own). Every client the
controller makes from its own (``for_component``) carries the same fence, so a new write path
is fenced without anyone remembering to; only the leader election's client is made
unfenced (``Kube.unfenced``), since renewing the lease is how the fence is opened again.

The fence is open until ``deadline``: the monotonic time at which the renewal that last
succeeded was *sent*, plus the elector's ``renew_deadline``. Another replica takes the lease
no sooner than ``lease_seconds`` after it *saw* that renewal (on its own monotonic clock, see
``LeaderElector``), which is later than it was sent, so the fence closes at least
``lease_seconds - renew_deadline`` (the safety margin) before anyone else may lead. The
monotonic clock goes on while a process is stopped, so a process resumed after SIGSTOP finds
its fence closed on its first write. (Linux's CLOCK_MONOTONIC does not count a machine's
suspend: a suspended whole host, unlike a stopped process, is outside what this covers.)

The residual window: a write checked just before the process stops is sent when it resumes
(the check and the send are a few instructions apart, not atomic), and a write sent inside the
fence may wait in the API server longer than the margin. The margin is that window's bound
for a write that reached the socket; the first case is not bounded by this fence.
"""

from __future__ import annotations

import logging
import threading

from autoclusters.clock import Clock
from autoclusters.kube.errors import KubeError

log = logging.getLogger(__name__)

READS = frozenset({"GET", "HEAD", "OPTIONS"})


class Fenced(KubeError):
    """A write refused because this replica no longer holds its lease (or may not: it could
    not renew it in time). The caller does nothing more; the elector stops the workers."""


class LeaseFence:
    """Open while the lease view of this replica is fresh by the monotonic clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._deadline: float | None = None  # None: never held, or given up
        self.refused = 0  # writes refused so far (a metric counts them)
        self._logged = False

    def grant(self, until: float) -> None:
        """The lease was renewed: writes may go on until monotonic time ``until``."""
        with self._lock:
            self._deadline = until if self._deadline is None else max(self._deadline, until)
            self._logged = False

    def revoke(self) -> None:
        """The lease is lost or given up: every write from now on is refused."""
        with self._lock:
            self._deadline = None

    def is_open(self) -> bool:
        with self._lock:
            return self._deadline is not None and self._clock.monotonic() < self._deadline

    def check(self, what: str) -> None:
        """Raises :class:`Fenced` unless the fence is open; ``what`` names the write in the error."""
        with self._lock:
            deadline = self._deadline
            now = self._clock.monotonic()
            if deadline is not None and now < deadline:
                return
            self.refused += 1
            first = not self._logged
            self._logged = True
        why = "no lease held" if deadline is None else f"lease view {now - deadline:.3f}s past its deadline"
        if first:  # one line per loss of the lease, not one per refused write
            log.error("writes fenced (%s): refused %s", why, what)
        else:
            log.debug("fenced: refused %s", what)
        raise Fenced(f"write fenced ({why}): {what}")
