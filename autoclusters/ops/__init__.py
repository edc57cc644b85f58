"""What an operator does day to day, as functions: see the fleet, approve repairs, read history.

The CLI (``autoclusters status|approve|history``), the demo and the example approval
controller call these; nothing here prints. Every function takes a ``Kube`` and a
``Names`` and returns plain dataclasses, so the same answers can be rendered as a table,
as JSON, or acted on by a script.
"""

from autoclusters.ops.approval import ApprovalResult, ApprovalStatus, approve_node, approve_nodes, approve_pool
from autoclusters.ops.fleet import FaultyNode, FleetSnapshot, PoolSummary, take_snapshot
from autoclusters.ops.history import HistoryQuery, list_repairs
from autoclusters.ops.records import Repair, Step

__all__ = [
    "ApprovalResult",
    "ApprovalStatus",
    "FaultyNode",
    "FleetSnapshot",
    "HistoryQuery",
    "PoolSummary",
    "Repair",
    "Step",
    "approve_node",
    "approve_nodes",
    "approve_pool",
    "list_repairs",
    "take_snapshot",
]
