"""Repair history from the ``Remediation`` records, which outlive the one-hour life of events.

A node's record is found by its node name and also by the replacement it brought: a
replaced node's history belongs to the new node's story too, since its name is new.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.ops import resources as res
from autoclusters.ops.repairs import Repair, repair_from_object

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RecordsNotInstalled(LookupError):
    """The ``Remediation`` CRD is not installed, so there is no history to read."""


@dataclass(frozen=True)
class HistoryQuery:
    node: str | None = None
    pool: str | None = None
    since: datetime | None = None  # repairs started (or still open) at or after this time

    def matches(self, r: Repair) -> bool:
        if self.node and self.node not in {r.node, r.replacement_node}:
            return False
        if self.pool and r.pool != self.pool:
            return False
        if self.since is not None:
            # An open repair is current whatever its start; a finished one counts by when it started or ended.
            last = r.ended() or r.started
            if not r.open and (last is None or last < self.since):
                return False
        return True


def select_repairs(records: list[dict], query: HistoryQuery) -> list[Repair]:
    """The matching repairs, oldest first."""
    repairs = [r for r in (repair_from_object(o) for o in records) if query.matches(r)]
    repairs.sort(key=lambda r: (r.started or _EPOCH, r.name))
    return repairs


def list_repairs(kube: Kube, names: Names, query: HistoryQuery) -> list[Repair]:
    records = res.list_remediations(kube, names)
    if records is None:
        raise RecordsNotInstalled(
            f"the Remediation CRD (remediations.{names.api_group}) is not installed, so there is no repair "
            "history yet; install autoclusters (pulumi up) first")
    return select_repairs(records, query)
