"""Validation shared by the components' argument classes."""

from __future__ import annotations

import re
from typing import Any

from autoclusters.pools.pool_config import PoolConfigError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ComponentArgsError(PoolConfigError):
    """A component argument that cannot be deployed; raised at construction, before any resource."""


def require_namespace(value: Any, component: str) -> None:
    if not isinstance(value, str) or not _DNS_LABEL.match(value):
        raise ComponentArgsError(f"{component}: namespace {value!r} must be a DNS label")


def require_image(value: Any, component: str, field: str = "image") -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ComponentArgsError(f"{component}: {field} {value!r} must be a container image reference")


def require_positive(value: Any, component: str, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ComponentArgsError(f"{component}: {field} must be an integer >= 1, got {value!r}")
