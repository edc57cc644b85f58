"""Leader election on a coordination.k8s.io/v1 Lease, so two replicas never both act.

Every write of the Lease is a PUT carrying the resourceVersion that was read: of two
replicas racing for an expired lease exactly one update succeeds, the other gets a
Conflict. Expiry is judged on this replica's own monotonic clock from the moment it last
saw the lease change (as client-go does), never by comparing two machines' wall clocks.
A leader that cannot renew within ``renew_deadline`` gives up before the lease expires,
so the next leader never overlaps with it; each request on the Lease waits at most
``renew_deadline`` (as client-go's), so an API server that stops answering (a black-holed
network) does not hold the elector past it. A leader renews with one request: the PUT of the
Lease its own last write returned (client-go's fast path); only when that PUT finds the Lease
changed by someone else (a Conflict) or gone does it read the Lease and decide as a candidate.

Why not the pinned ``kubernetes`` library's ``leaderelection`` with its ``LeaseLock`` (read
in its source, version 37): an API server it cannot reach makes ``LeaseLock.get`` raise
urllib3's ``MaxRetryError`` (it catches only ``ApiException``), which leaves ``run`` while
the leading callback's thread goes on: a leader that keeps acting with nobody renewing its
lease. It has no way to stop a candidate (``acquire`` loops forever on ``time.sleep``) and
no release on a clean stop, so every rollout waits out a whole lease; it judges expiry on
the wall clock (``time.time``), takes no injectable clock, exits the process
(``sys.exit``) on a bad setting, refuses periods under a second, never counts
``leaseTransitions``, and talks through its own ``CoordinationV1Api`` on the library's
global configuration instead of this client (its transport, user agent, request counts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from autoclusters.clock import Clock, utc_iso_micro
from autoclusters.kube.client import Kube
from autoclusters.kube.errors import Conflict, KubeError, NotFound
from autoclusters.kube.fence import LeaseFence

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, kube: Kube, clock: Clock, *, namespace: str, name: str, identity: str,
                 lease_seconds: float = 15, renew_deadline: float = 10, retry_period: float = 2,
                 may_acquire: Callable[[], bool] | None = None, fence: LeaseFence | None = None) -> None:
        """``may_acquire``: asked before each attempt to take the lease (not to renew it); while
        it answers False this replica does not campaign (the controller's shard layout guard).
        ``fence``: opened by each successful acquire or renewal until ``renew_deadline`` after the
        request was sent, closed when the lease is lost or released (:mod:`autoclusters.kube.fence`)."""
        if not renew_deadline < lease_seconds:
            raise ValueError("renew_deadline must be shorter than the lease duration")
        self._kube = kube
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._ns_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._observed: tuple[str, float] = ("", 0.0)  # (holder+renewTime, when we saw it change)
        self._written: dict[str, Any] | None = None  # the Lease as our last write left it, while we hold it
        self._leader = threading.Event()
        self._may_acquire = may_acquire
        self.fence = fence
        self._attempt_sent = 0.0  # monotonic time the current attempt began (before its request)

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def try_acquire_or_renew(self) -> bool:
        self._attempt_sent = self._clock.monotonic()
        if self._written is not None and self._renew(self._written):
            return True  # renewed on the Lease our last write returned: no read
        try:
            lease = self._kube.request("GET", self._path, timeout=self.renew_deadline)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self._name},
                    "spec": self._spec(transitions=0, acquire=True)}
            try:
                self._wrote(self._kube.request("POST", self._ns_path, body=body, timeout=self.renew_deadline))
                return True
            except Conflict:
                return False
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        seen = f"{holder}|{spec.get('renewTime')}"
        mono = self._clock.monotonic()
        if seen != self._observed[0]:
            self._observed = (seen, mono)
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and self.fence is not None:
            self.fence.revoke()  # someone else holds it (or may take it now): not us
        if holder and holder != self.identity and mono < self._observed[1] + duration:
            # the candidate's sign that it looked and left the lease to its holder (``--verbose``)
            log.debug("lease %s held by %s (renewed %s): not taken", self._name, holder, spec.get("renewTime"))
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = holder == self.identity
        new_spec = self._spec(transitions=transitions if mine else transitions + 1, acquire=not mine)
        if mine:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["acquireTime"]
        lease["spec"] = new_spec
        try:
            self._wrote(self._put(lease))  # carries metadata.resourceVersion: a precondition
        except Conflict:
            return False
        return True

    def _renew(self, written: dict[str, Any]) -> bool:
        """The leader's renewal on its own last write; False (and forgotten) when the Lease changed
        since or is gone: the caller then reads it."""
        spec = dict(written.get("spec") or {})
        spec["renewTime"] = utc_iso_micro(self._clock.now())
        try:
            self._wrote(self._put({**written, "spec": spec}))
            return True
        except (Conflict, NotFound):
            self._written = None
            return False

    def _put(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self._kube.request("PUT", self._path, body=lease, timeout=self.renew_deadline)

    def _wrote(self, lease: dict[str, Any]) -> None:
        """Keeps the Lease our write returned (and what it says, as seen now) for the next renewal."""
        spec = lease.get("spec") or {}
        self._written = lease if spec.get("holderIdentity") == self.identity else None
        if self.fence is not None and self._written is not None:
            self.fence.grant(self._attempt_sent + self.renew_deadline)
        self._observed = (f"{spec.get('holderIdentity') or ''}|{spec.get('renewTime')}", self._clock.monotonic())

    def _spec(self, *, transitions: int, acquire: bool) -> dict[str, Any]:
        now = utc_iso_micro(self._clock.now())
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": now, "renewTime": now, "leaseTransitions": transitions}

    def run(self, stop: threading.Event, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        """Blocks: campaigns until leader, renews, and calls ``on_stopped`` if leadership is lost."""
        while not stop.is_set():
            if (self._may_acquire is None or self._may_acquire()) and self._attempt():
                break
            stop.wait(self.retry_period)
        if stop.is_set():
            return
        self._leader.set()
        log.info("%s became the leader (lease %s)", self.identity, self._name)
        on_started()
        last_renew = self._clock.monotonic()
        while not stop.wait(self.retry_period):
            if self._attempt():
                last_renew = self._clock.monotonic()
            elif self._clock.monotonic() - last_renew > self.renew_deadline:
                break
        self._leader.clear()
        if self.fence is not None:
            self.fence.revoke()
        if not stop.is_set():
            log.error("%s lost the leadership (lease %s)", self.identity, self._name)
        on_stopped()

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except KubeError as e:
            log.warning("lease %s: %s", self._name, e)
            return False

    def release(self) -> None:
        """On a clean shutdown: let the next replica take over at once."""
        try:
            lease = self._kube.get(self._path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            self._written = None
            if self.fence is not None:
                self.fence.revoke()  # before the lease is given away
            self._kube.replace(self._path, lease)
        except KubeError as e:
            log.info("lease %s not released: %s", self._name, e)
