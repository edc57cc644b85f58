"""The series names a registry's metric families are exported under, for tests that check a
query or a rule names only metrics a process exports."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric


def metric_names(families: Iterable[Metric]) -> set[str]:
    """Counters as ``<name>_total``, histograms as their ``_bucket``/``_sum``/``_count`` series,
    the rest by name: from the family's type, so a labelled family with no child yet counts."""
    names: set[str] = set()
    for family in families:
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{s}" for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names
