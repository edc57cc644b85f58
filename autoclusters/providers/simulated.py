"""The simulated provider's declaration: the simulation's one door from the product.

The provider itself lives in ``sim/provider.py`` (above the product's layers); it is loaded
only when a pool names this type (``_build``), so a controller on real nodes never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.providers.base import BuildContext, Provider
from autoclusters.providers.declaration import ProviderKind, Rule, Setting


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    from autoclusters.sim.provider import SimulatedProvider

    return SimulatedProvider(c.kube, c.clock, c.names,
                             reset_seconds=float(s.get("resetSeconds", c.sim_reset_seconds)),
                             replace_seconds=float(s.get("replaceSeconds", c.sim_replace_seconds)), nodes=c.nodes)


KIND = ProviderKind(
    "simulated", (RepairAction.RESET.value, RepairAction.REPLACE.value),
    "kwok nodes of the local simulator only: reset = NotReady then Ready with a new boot id, "
    "replace = a new node joins the pool. Refuses any node kwok does not manage.",
    (Setting("resetSeconds", "integer", "How long a reset takes (default: the controller's "
             "--sim-reset-seconds).", minimum=0),
     Setting("replaceSeconds", "integer", "How long a replacement takes (default: the controller's "
             "--sim-replace-seconds).", minimum=0)),
    rules=(Rule("", "nodes", ("create", "delete")), Rule("", "nodes/status", ("patch",))),
    local_only=True, build=_build)
