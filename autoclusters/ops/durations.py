"""Durations as operators type and read them: ``90s``, ``15m``, ``24h``, ``7d``, ``2w``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from autoclusters.clock import parse_iso

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


class DurationError(ValueError):
    """Text that is neither a duration nor a timestamp."""


def parse_since(text: str, now: datetime) -> datetime:
    """``--since`` as a duration back from ``now`` (``24h``) or an RFC 3339 time / date."""
    m = _DURATION.match(text)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
    try:
        when = parse_iso(text.strip())
    except ValueError:
        when = None
    if when is None:
        raise DurationError(f"--since {text!r}: expected a duration such as 30m, 24h, 7d, or a time such as "
                            "2026-01-31T12:00:00Z")
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def human_duration(seconds: float | None) -> str:
    """Short and exact enough to compare repairs: ``42s``, ``3m05s``, ``2h14m``, ``3d4h``."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"
