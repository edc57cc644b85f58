"""The repair actions, as one table: what each does to a node, how its success is proved, which
drain deadline it takes and where a failure goes.

The state machine (``controller/statemachine.py``) reads every answer about an action from
here and has no branch per action; a provider says which actions it supports
(``ProviderKind.actions``), the pool chooses one per fault (the catalog, ``faultClasses``,
``repairCodes``). A new action (a single-GPU reset, say) is one ``ActionKind`` registered here
(or by a provider module) and a provider that supports it: the CRD's enums, the pool parser,
the Remediation record and the state machine pick it up (tests/unit/providers/test_actions_plugin.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from autoclusters.api import RepairAction


class Proof(StrEnum):
    """How the controller decides that an action worked (the Verifying phase)."""

    REBOOTED = "rebooted"  # the same node, Ready again with a new boot id and free of the fault
    CLEARED = "cleared"  # the same node, Ready and free of the fault (no reboot: a GPU reset, say)
    REPLACED = "replaced"  # a new node Ready in the pool took the node's place


class Deadline(StrEnum):
    """The pool's drain deadlines (``resetDeadlineSeconds``, ``replaceDeadlineSeconds``): an action takes one."""

    RESET = "reset"
    REPLACE = "replace"


@dataclass(frozen=True)
class ActionKind:
    name: str  # as a Remediation's action, a pool's repairCodes value and a provider's per-action field
    noun: str  # in the events' words: "VM reset"
    short: str  # in the record's steps: "escalating to a {short}", "the {short} warns its workloads first"
    past: str  # "the node is {past} directly": "reset", "replaced"
    doing: str  # "{doing} under the same approval": "resetting the node", "replacing the node"
    proof: Proof
    deadline: Deadline  # the pool's drain deadline this action's drain takes
    # what a failure escalates to under the same approval, and what a fault that comes back soon
    # after a success is repaired with ("": a failure holds the node for a human)
    escalates_to: str = ""
    opt_out_holds: bool = False  # a pod's auto-replacement opt-out holds the repair until it is approved
    # every pool needs a provider for it (else its RepairProviderReady is False); an optional action
    # a pool has no provider for is held when a fault asks for it ("no repair provider configured")
    every_pool: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(self.name))  # a plain string (YAML, JSON, Rego)
        object.__setattr__(self, "escalates_to", str(self.escalates_to))

    @property
    def keeps_node(self) -> bool:
        """The node stays (a reset of some kind): its success counts in the node's reset history."""
        return self.proof != Proof.REPLACED


class ActionTable:
    """The registered actions, in registration order (the built-in ones first)."""

    def __init__(self, kinds: Iterable[ActionKind]) -> None:
        self._kinds: dict[str, ActionKind] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: ActionKind) -> ActionKind:
        if kind.name in self._kinds and self._kinds[kind.name] != kind:
            raise ValueError(f"action {kind.name!r} is registered already")
        self._kinds[kind.name] = kind
        return kind

    def unregister(self, name: str) -> None:
        """For a test that registered an action of its own."""
        if any(k.escalates_to == name for k in self._kinds.values() if k.name != name):
            raise ValueError(f"action {name!r} is the escalation of another action")
        self._kinds.pop(name, None)

    def __getitem__(self, name: str) -> ActionKind:
        try:
            return self._kinds[str(name)]
        except KeyError:
            raise KeyError(f"no repair action {name!r}; registered: {', '.join(self._kinds)}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._kinds

    def __iter__(self) -> Iterator[ActionKind]:
        return iter(tuple(self._kinds.values()))

    def names(self) -> tuple[str, ...]:
        return tuple(self._kinds)

    def required(self) -> tuple[str, ...]:
        """The actions every pool needs a provider for."""
        return tuple(k.name for k in self._kinds.values() if k.every_pool)

    def escalated_from(self, name: str) -> str:
        """The action whose failure escalates to ``name`` ("" when none does)."""
        return next((k.name for k in self._kinds.values() if k.escalates_to == name), "")


ACTIONS = ActionTable((
    ActionKind(RepairAction.RESET, "VM reset", "reset", "reset", "resetting the node", Proof.REBOOTED, Deadline.RESET,
               escalates_to=RepairAction.REPLACE,
               description="The node's host is rebooted or power-cycled; the node comes back under its name."),
    ActionKind(RepairAction.REPLACE, "node replacement", "replacement", "replaced", "replacing the node",
               Proof.REPLACED, Deadline.REPLACE, opt_out_holds=True,
               description="A new node takes the node's place in the pool."),
))
