"""Builds the provider a pool names in ``GpuNodePool.spec.provider``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoclusters.clock import Clock
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.providers.base import Provider, ProviderError
from autoclusters.providers.clusterapi import ClusterApiProvider
from autoclusters.providers.command import CommandProvider
from autoclusters.providers.simulated import SimulatedProvider


def build_provider(spec: Mapping[str, Any], kube: Kube, clock: Clock, names: Names, *,
                   sim_reset_seconds: float = 5, sim_replace_seconds: float = 5) -> Provider:
    """``spec`` is the pool's provider mapping; simulated timings default to the controller's flags."""
    kind = spec.get("type", "simulated")
    if kind == "simulated":
        return SimulatedProvider(kube, clock, names,
                                 reset_seconds=float(spec.get("resetSeconds", sim_reset_seconds)),
                                 replace_seconds=float(spec.get("replaceSeconds", sim_replace_seconds)))
    if kind == "clusterapi":
        return ClusterApiProvider(kube, clock, version=str(spec.get("version", "v1beta1")))
    if kind == "command":
        argv = spec.get("command")
        if isinstance(argv, str):
            argv = [argv]
        return CommandProvider(argv or [], timeout=float(spec.get("timeoutSeconds", 900)))
    raise ProviderError(f"unknown provider type {kind!r}; expected simulated, clusterapi or command")
