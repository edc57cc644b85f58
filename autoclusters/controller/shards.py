"""Sharding the controller by pool: which controller process owns which pool.

Pools are the independent units of the repair state machine (their concurrency limit, their
circuit breaker, their consent mode and their status are each the pool's own), so a shard owns
whole pools and no shard needs to ask another anything. A pool belongs to shard
``stable_hash(pool name) % shards``; the hash is a prefix of the name's SHA-256, the same in
every process and every Python (never the built-in ``hash``, which is randomized per process).
A node belongs to the shard of the pool the membership rule puts it in (``pools.membership``),
or, while it has a repair in progress, to the shard of that repair's pool; a node in no pool
and without a repair in progress belongs to the shard its own name hashes to
(``shard_of_node``), which removes the marks a repair may have left on it (its pool deleted,
or its pool label removed, while it was marked), as the unsharded controller does.

Each shard elects its own leader on a Lease of its own (``lease_name``): with one shard the
name is the unsharded one, so an upgrade keeps its lease; with N shards it names the shard and
N, so the leases of two layouts (N=2 and N=3 during a change of N) never share a name. A
replica of one layout does not start leading while a lease of another layout is held
(``Layout.foreign_holders``), so during a rolling change of N the new layout waits for the old
one to be gone (docs/controller.md, "Scaling out").
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field

from autoclusters.clock import Clock
from autoclusters.kube import Forbidden, Kube, KubeError

log = logging.getLogger(__name__)

# <lease>-shard-<i>-of-<n>: the lease of shard i of a layout of n shards
_SHARD_LEASE = re.compile(r"^(?P<base>.+)-shard-(?P<shard>\d+)-of-(?P<shards>\d+)$")


class ShardConfigError(ValueError):
    """Shard settings that cannot work (the message names the flags)."""


def stable_hash(name: str) -> int:
    """A 64-bit hash of ``name`` that every process computes alike."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


def shard_of(pool: str, shards: int) -> int:
    """The shard that owns ``pool`` in a layout of ``shards`` shards."""
    return stable_hash(pool) % shards if shards > 1 else 0


def shard_of_node(node: str, shards: int) -> int:
    """The shard that owns ``node`` while it is in no pool and has no repair in progress: the
    one its name hashes to, by the pools' rule (exactly one shard looks at it)."""
    return shard_of(node, shards)


def check(shards: int, shard: int) -> None:
    """Raises ShardConfigError unless 0 <= shard < shards."""
    if shards < 1:
        raise ShardConfigError(f"--shards must be at least 1 (got {shards})")
    if not 0 <= shard < shards:
        raise ShardConfigError(f"--shard must be between 0 and --shards - 1 = {shards - 1} (got {shard})")


def lease_name(base: str, shards: int, shard: int) -> str:
    """The shard's Lease: ``base`` itself with one shard (the unsharded name), else
    ``<base>-shard-<shard>-of-<shards>``."""
    return base if shards == 1 else f"{base}-shard-{shard}-of-{shards}"


def layout_of(lease: str, base: str) -> int | None:
    """The number of shards of the layout a Lease named ``lease`` belongs to (1: the unsharded
    lease ``base``), or None when it is no lease of this controller."""
    if lease == base:
        return 1
    m = _SHARD_LEASE.match(lease)
    if m is None or m.group("base") != base:
        return None
    return int(m.group("shards"))


@dataclass(frozen=True)
class Shard:
    """This process's place in the layout: it owns the pools ``shard_of`` gives it."""

    shards: int = 1
    shard: int = 0
    _owned: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check(self.shards, self.shard)

    @property
    def sharded(self) -> bool:
        return self.shards > 1

    def owns(self, pool: str) -> bool:
        """Whether this shard owns ``pool`` (a GpuNodePool's name or a pool label value). The
        answer is kept per name: informer handlers ask on every event."""
        if self.shards == 1:
            return True
        mine = self._owned.get(pool)
        if mine is None:
            mine = self._owned[pool] = shard_of(pool, self.shards) == self.shard
        return mine

    def owns_unpooled(self, node: str) -> bool:
        """Whether this shard owns ``node`` while it is in no pool and has no repair in progress
        (not kept: node names come and go, pools stay)."""
        return self.shards == 1 or shard_of_node(node, self.shards) == self.shard


class LayoutGuard:
    """Keeps a replica from leading while a replica of another layout leads.

    Two layouts (before and after a change of ``--shards``) place pools differently, so while
    both lead, one pool could have a leader in each: two writers of its status and, worse, two
    judges of its concurrency limit. A replica therefore takes its lease only when no Lease of
    this controller of another layout (another N, or the unsharded lease) is held. A held lease
    is judged as the elector judges its own: on this replica's monotonic clock, from the moment
    it saw the lease change, never by comparing wall clocks; a released lease (holder "") is
    free at once.
    """

    def __init__(self, kube: Kube, clock: Clock, *, namespace: str, base: str, shards: int) -> None:
        self._kube = kube
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._base = base
        self._shards = shards
        self._observed: dict[str, tuple[str, float]] = {}  # lease -> (holder|renewTime, when seen to change)
        self._said = ""

    def foreign_holders(self) -> list[str]:
        """``<lease> (<holder>)`` of every held Lease of another layout."""
        held = []
        mono = self._clock.monotonic()
        for lease in self._kube.list_items(self._path):
            name = str(lease["metadata"]["name"])
            layout = layout_of(name, self._base)
            if layout is None or layout == self._shards:
                continue
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            seen = f"{holder}|{spec.get('renewTime')}"
            if self._observed.get(name, ("", 0.0))[0] != seen:
                self._observed[name] = (seen, mono)
            duration = float(spec.get("leaseDurationSeconds") or 0)
            if holder and mono < self._observed[name][1] + duration:
                held.append(f"{name} ({holder})")
        return held

    def may_lead(self) -> bool:
        """False while another layout leads (said once in the log per change of the answer)."""
        try:
            held = self.foreign_holders()
        except Forbidden as e:
            if self._shards == 1:
                # A Role from before sharding (no "list" on leases): no sharded layout can have
                # led under it either (it would be refused here), so the unsharded controller
                # keeps working as before the upgrade, and says what to re-apply.
                if self._said != "forbidden":
                    self._said = "forbidden"
                    log.error("cannot list leases (%s): re-apply the controller's RBAC (deploy/controller.py); "
                              "leading without the shard layout guard", e)
                return True
            log.error("cannot list leases (%s): a sharded controller does not lead without the shard layout "
                      "guard; re-apply the controller's RBAC (deploy/controller.py)", e)
            return False
        except KubeError as e:
            log.warning("leases of other shard layouts not readable: %s; not leading yet", e)
            return False
        said = ", ".join(held)
        if said != self._said:
            self._said = said
            if held:
                log.warning("not leading while another shard layout leads: %s held (a change of --shards waits "
                            "until the old layout's replicas are gone)", said)
            else:
                log.info("no other shard layout leads: campaigning for the lease")
        return not held
