"""A pool's policy as the controller reads it from a ``GpuNodePool`` object.

The spec is parsed with the same strict parser the deployment uses
(``pools.pool_config.pool_from_config``), so a pool object means the same thing wherever it is
read. Which nodes belong is the membership rule of ``pools.membership``, shared with the
operator tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoclusters.api import BreakerState, CatalogAction, ClassAction, ConsentMode, RepairAction
from autoclusters.controller.statemachine import RepairPolicy
from autoclusters.deploy.providers import KINDS, ProviderSpec
from autoclusters.faults.catalog import FaultRef
from autoclusters.pools.membership import config_of, provider_error
from autoclusters.pools.pool_config import PoolConfig, PoolConfigError
from autoclusters.providers.actions import ACTIONS


@dataclass(frozen=True)
class Pool:
    name: str
    config: PoolConfig
    obj: Mapping[str, Any]
    provider_error: str = ""  # invalid spec.provider: the pool still reports faults, repairs are held
    default: bool = False  # no GpuNodePool: the nodes' pool label, under the cluster default policy

    def provider_for(self, action: str) -> ProviderSpec | None:
        return None if self.provider_error else self.config.provider.for_action(action)

    @property
    def mode(self) -> ConsentMode:
        return self.config.consent_mode

    @property
    def breaker_state(self) -> str:
        return str((((self.obj.get("status") or {}).get("circuitBreaker")) or {}).get("state", BreakerState.CLOSED))

    def action_for(self, fault: FaultRef) -> str | None:
        """The pool's action for a fault, as its provider carries it out (``carried_out``); None = not repaired."""
        chosen = self.chosen_action(fault)
        return None if chosen is None else self.carried_out(chosen)[0]

    def carried_out(self, action: str) -> tuple[str, str]:
        """The action a repair of ``action`` is, and why in words ("" when itself): the pool's
        provider for it may carry it out as another of its actions (``ProviderKind.carries_out``:
        the clusterapi provider's reset deletes the Machine, a replacement), and the repair is
        then that action throughout: its drain deadline, its approval rules, its proof, and the
        pool's provider for it."""
        spec = self.provider_for(action)
        done_as = KINDS[spec.type].carried_out_as(action) if spec is not None and spec.type in KINDS else action
        if done_as == action:
            return action, ""
        return done_as, (f"The pool's {action} provider {spec.type if spec else ''} carries out a {action} as a "
                         f"{ACTIONS[done_as].short}, so the node is {ACTIONS[done_as].past}.")

    def chosen_action(self, fault: FaultRef) -> str | None:
        """The action the pool chooses for a fault, before its provider's say; None = not repaired.

        A code the pool names in ``spec.repairCodes`` gets that repair: the one way to repair a
        code whose catalog action is none (an application or software bucket, an unknown code,
        Xid 154 asking for nothing). Otherwise the class override (``faultClasses``) applies to
        the codes that repair (``off`` ignores the class), else the catalog's action.
        """
        named = self.config.repair_codes.get(fault.key)
        if named is not None:
            return named
        override = self.config.fault_classes.get(fault.fault_class.value, ClassAction.DEFAULT)
        if override == ClassAction.OFF or fault.application or fault.action == CatalogAction.NONE:
            return None
        if override in (ClassAction.RESET, ClassAction.REPLACE):
            return RepairAction(override.value)
        return RepairAction(fault.action.value)

    def policy(self, base: RepairPolicy) -> RepairPolicy:
        c = self.config
        return replace(
            base, reset_drain_seconds=c.reset_deadline_seconds, replace_drain_seconds=c.replace_deadline_seconds,
            refault_window_seconds=c.refault_window_seconds, reset_memory_seconds=c.reset_memory_seconds,
            max_repairs=c.max_repairs, pre_drain_wait_seconds=c.pre_drain.wait_seconds,
            acknowledgers=tuple(c.pre_drain.acknowledgers), slinky=c.pre_drain.slinky)


def parse_pool(obj: Mapping[str, Any]) -> Pool:
    """Raises PoolConfigError with the field named when the object cannot be used.

    Invalid provider settings do not make the pool unusable: its nodes' faults are still
    reported and marked, and its repairs are held with the error (``Pool.provider_error``).
    """
    config = config_of(obj)
    return Pool(config.name, config, obj, provider_error=provider_error(obj))


def default_pool(name: str, spec: Mapping[str, Any]) -> Pool | None:
    """Pool ``name`` (a pool label value no GpuNodePool has) under the default policy ``spec``;
    None when the label value cannot name a pool."""
    obj = {"metadata": {"name": name}, "spec": dict(spec)}
    try:
        config = config_of(obj)
    except PoolConfigError:
        return None
    return Pool(name, config, obj, provider_error=provider_error(obj), default=True)


__all__ = ["Pool", "PoolConfigError", "default_pool", "parse_pool"]
