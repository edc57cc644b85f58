"""What the controller and the providers share: a pool's choice of one provider, one provider
operation and where it stands.

``ProviderSpec`` is one provider with its checked settings: the parser (``deploy/providers.py``)
makes it, the registry (``providers/registry.py``) builds the provider from it. The state
machine (``controller/statemachine.py``) starts an ``Operation`` and reads a ``ProviderView``
back; a provider receives the one and answers with the other. All live here, in
``providers/``, so a provider imports nothing from ``controller/`` or ``deploy/``
(tests/unit/test_layers.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class ProviderState(StrEnum):
    NOT_STARTED = "NotStarted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Operation:
    """One provider call: its id makes a retried start a no-op (the provider records it)."""

    id: str
    action: str  # an action of the action table (providers/actions.py): reset, replace, ...
    started: datetime
    boot_id_before: str = ""
    new_node: str = ""
    # The provider it was started with (its spec, ``ProviderSpec.key()``): every later look and
    # call goes to that provider, whatever the pool's settings say since. "" in a record written
    # before operations were bound: the pool's provider of the moment, as then.
    provider: str = ""


@dataclass(frozen=True)
class ProviderView:
    state: ProviderState = ProviderState.NOT_STARTED
    message: str = ""
    new_node: str = ""
    next_check: float | None = None  # seconds until the provider expects progress (sooner than a poll)
    # Every change of the operation's progress shows on the node itself (annotations, boot id,
    # readiness), whose changes the controller watches: the next look waits for one of them (or
    # next_check, or the operation's timeout) instead of polling every poll_seconds.
    shows_on_node: bool = False


@dataclass(frozen=True)
class ProviderSpec:
    """One provider and its checked settings (camelCase, defaults filled in)."""

    type: str  # a key of KINDS
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", str(self.type))

    def to_dict(self) -> dict[str, Any]:
        return {"type": str(self.type), str(self.type): dict(self.settings)}

    def key(self) -> str:
        """The spec as a string (a cache key); computed once: the controller asks on every reconcile."""
        key = self.__dict__.get("_key")
        if key is None:
            key = json.dumps(self.to_dict(), sort_keys=True)
            object.__setattr__(self, "_key", key)  # frozen: set once, equality still compares the fields
        return str(key)
