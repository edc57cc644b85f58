"""What an operator does day to day, as functions: see the fleet, approve repairs, read history.

The CLI (``autoclusters status|approve|history``), the demo and the example approval
controller call these; nothing here prints. Every function takes a ``Kube`` and a
``Names`` and returns plain dataclasses, so the same answers can be rendered as a table,
as JSON, or acted on by a script.
"""

from autoclusters.ops.approval import ApprovalResult, ApprovalStatus, approve_node, approve_nodes, approve_pool
from autoclusters.ops.history import HistoryQuery, list_repairs
from autoclusters.ops.repairs import HistoryStep, Repair
from autoclusters.ops.snapshot import FaultyNode, FleetSnapshot, PoolSummary, take_snapshot

__all__ = [
    "ApprovalResult",
    "ApprovalStatus",
    "FaultyNode",
    "FleetSnapshot",
    "HistoryQuery",
    "HistoryStep",
    "PoolSummary",
    "Repair",
    "approve_node",
    "approve_nodes",
    "approve_pool",
    "list_repairs",
    "take_snapshot",
]
