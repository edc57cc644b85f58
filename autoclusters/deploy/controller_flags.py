"""The controller's flags an operator tunes, as the stack setting ``controller`` (issue 29 item 3):
``controller: {workers: 32, retentionDays: 30}`` becomes ``--workers 32 --retention-days 30``
on the controller's container. Each key is a field of ``controller.controller_config.ControllerConfig``
(a unit test holds the names, types and defaults equal; this layer cannot import it), and each
value is checked here with a message that names the key.

Left out on purpose: what the deployment itself decides (namespace, identity, shards, metrics
port, the webhook's certificate, the provider image), what has a stack key of its own
(``hostRebootCommand``, ``eventSource``, ``imagePullSecrets``), the local cluster's simulation
timings, and the catalog path (a file the container would need mounted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ControllerFlagsError(ValueError):
    """A ``controller`` setting that is not a flag, or a value it cannot take."""


@dataclass(frozen=True)
class Tunable:
    field: str  # ControllerConfig's field (its flag: --field-with-dashes)
    kind: type  # int, float or str
    doc: str
    minimum: float | None = None  # numbers: the least value (inclusive)

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


TUNABLES: dict[str, Tunable] = {_camel(t.field): t for t in (
    Tunable("workers", int, "parallel reconciles", 1),
    Tunable("resync_seconds", float, "every key is looked at again this often", 1),
    Tunable("verify_timeout_seconds", float, "how long a repaired node may take to come back Ready", 1),
    Tunable("operation_timeout_seconds", float, "how long a provider's action may take", 1),
    Tunable("poll_seconds", float, "how often a running action is looked at", 0.1),
    Tunable("hold_recheck_seconds", float, "how often a held repair is looked at again", 1),
    Tunable("pool_status_delay_seconds", float, "a burst of node changes writes a pool's status once, this late", 0),
    Tunable("watch_gather_seconds", float, "the watches read a burst's events together, waiting at most this", 0),
    Tunable("retention_days", float, "closed Remediation records are kept this long", 0.001),
    Tunable("gc_interval_seconds", float, "how often old records are collected", 1),
    Tunable("lease_seconds", float, "the leader Lease's duration", 1),
    Tunable("renew_deadline_seconds", float, "the leader gives up leading when it cannot renew for this long", 1),
    Tunable("retry_period_seconds", float, "how often the Lease is renewed or tried", 0.1),
    Tunable("notifier_url", str, "POST failed-repair notifications (JSON) to this http(s) URL"),
)}


def controller_flags(data: Any) -> tuple[tuple[str, str], ...]:
    """The ``controller`` stack setting as (flag, value) pairs, in ``TUNABLES``' order."""
    if not isinstance(data, Mapping):
        raise ControllerFlagsError(f"controller must be an object of flag settings, got {data!r}")
    unknown = sorted(set(data) - set(TUNABLES))
    if unknown:
        raise ControllerFlagsError(f"controller: unknown settings {unknown} (known: {', '.join(TUNABLES)})")
    out = []
    for key, t in TUNABLES.items():
        if key not in data:
            continue
        value = data[key]
        if t.kind is str:
            if not isinstance(value, str) or not value.startswith(("http://", "https://")):
                raise ControllerFlagsError(f"controller.{key} must be an http:// or https:// URL, got {value!r}")
            out.append((t.flag, value))
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or (t.kind is int and
                                                                             not isinstance(value, int)):
            raise ControllerFlagsError(f"controller.{key} must be {'an integer' if t.kind is int else 'a number'}, "
                                       f"got {value!r}")
        if t.minimum is not None and value < t.minimum:
            raise ControllerFlagsError(f"controller.{key} must be at least {t.minimum:g}, got {value!r}")
        out.append((t.flag, str(value)))
    return tuple(out)


def docs_table() -> str:
    lines = ["| key (under `controller`) | flag | what it sets |", "|---|---|---|"]
    lines += [f"| `{key}` | `{t.flag}` | {t.doc} |" for key, t in TUNABLES.items()]
    return "\n".join(lines)


DOCS_MARKER = "<!-- controller-flags-table"


if __name__ == "__main__":  # make manifests: python -m autoclusters.deploy.controller_flags docs/deploy.md
    import sys

    from autoclusters import doc_tables

    doc_tables.rewrite(sys.argv[1], DOCS_MARKER, docs_table())
