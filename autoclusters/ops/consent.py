"""Changing a pool's consent mode from a terminal (docs/contract.md, "Pools and consent modes": Pulumi, git, or a CLI).

The change is a merge patch of ``spec.consentMode`` alone, so nothing else in the pool object
moves. The controller applies it to its next decision: a repair already started completes;
one awaiting approval starts if the pool moves to ``auto``; ``off`` cancels repairs that have
not started. A pool kept in git or a Pulumi stack drifts from its source after this; the
next ``pulumi up`` or sync puts the source's value back.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoclusters import api
from autoclusters.api import ConsentMode
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.ops import resources as res


class PoolNotFound(LookupError):
    """No such ``GpuNodePool`` (or the CRD is not installed)."""


@dataclass(frozen=True)
class ModeChange:
    pool: str
    old: str
    new: str
    dry_run: bool

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def to_dict(self) -> dict[str, object]:
        return {"pool": self.pool, "from": self.old, "to": self.new, "changed": self.changed,
                "dryRun": self.dry_run}


def set_consent_mode(kube: Kube, names: Names, pool: str, mode: ConsentMode | str, *,
                     field_manager: str = "autoclusters-cli", dry_run: bool = False) -> ModeChange:
    new = ConsentMode(mode).value  # ValueError on a mode that does not exist
    obj = res.get_pool(kube, names, pool)
    if obj is None:
        raise PoolNotFound(f"no GpuNodePool {pool!r} (kubectl get gnp lists the pools; is the "
                           f"{api.POOLS.plural}.{names.api_group} CRD installed?)")
    old = str((obj.get("spec") or {}).get("consentMode") or ConsentMode.AUTO.value)
    if old != new and not dry_run:
        try:
            kube.patch(res.pools_path(names, pool), {"spec": {"consentMode": new}}, fieldManager=field_manager)
        except NotFound as e:
            raise PoolNotFound(f"GpuNodePool {pool!r} was deleted") from e
    return ModeChange(pool, old, new, dry_run)
