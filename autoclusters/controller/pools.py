"""A pool's policy as the controller reads it from a ``GpuNodePool`` object.

The spec is parsed with the same strict parser the deployment uses
(``deploy.pools.pool_from_config``), so a pool object means the same thing wherever it is
read. Which nodes belong: ``spec.nodeSelector`` when given, else the pool label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoclusters.controller.statemachine import ConsentMode, Policy, RepairAction
from autoclusters.deploy.pools import FaultAction, PoolConfig, PoolConfigError, pool_from_config
from autoclusters.faults.catalog import Action, FaultRef
from autoclusters.kube.objects import selector_matches
from autoclusters.names import Names


@dataclass(frozen=True)
class Pool:
    name: str
    config: PoolConfig
    obj: Mapping[str, Any]

    @property
    def mode(self) -> ConsentMode:
        return ConsentMode(self.config.consent_mode.value)

    @property
    def breaker_state(self) -> str:
        return str((((self.obj.get("status") or {}).get("circuitBreaker")) or {}).get("state", "Closed"))

    def selects(self, node: Mapping[str, Any], names: Names) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if self.config.node_selector is not None:
            return selector_matches(self.config.node_selector, labels)
        return labels.get(names.pool_label) == self.name

    def action_for(self, fault: FaultRef) -> RepairAction | None:
        """The pool's action for a fault: the class override, else the catalog's; None = not repaired."""
        override = self.config.fault_classes.get(fault.fault_class.value, FaultAction.DEFAULT)
        if override == FaultAction.OFF:
            return None
        if override in (FaultAction.RESET, FaultAction.REPLACE):
            return RepairAction(override.value)
        if fault.action in (Action.RESET, Action.REPLACE):
            return RepairAction(fault.action.value)
        return None

    def policy(self, base: Policy) -> Policy:
        c = self.config
        return Policy(
            reset_drain_seconds=c.reset_deadline_seconds, replace_drain_seconds=c.replace_deadline_seconds,
            refault_window_seconds=c.refault_window_seconds, reset_memory_seconds=c.reset_memory_seconds,
            max_repairs=c.max_repairs, verify_timeout_seconds=base.verify_timeout_seconds,
            operation_timeout_seconds=base.operation_timeout_seconds, poll_seconds=base.poll_seconds,
            hold_recheck_seconds=base.hold_recheck_seconds)


def parse_pool(obj: Mapping[str, Any]) -> Pool:
    """Raises PoolConfigError with the field named when the object cannot be used."""
    name = (obj.get("metadata") or {}).get("name", "")
    spec = dict(obj.get("spec") or {})
    return Pool(name, pool_from_config({"name": name, **spec}), obj)


__all__ = ["Pool", "PoolConfigError", "parse_pool", "selector_matches"]
