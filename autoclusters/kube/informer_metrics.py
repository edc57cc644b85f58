"""The informers' handler errors and lists as Prometheus counters, in every process that runs informers.

``autoclusters_informer_handler_errors_total{informer}`` counts the changes of one object an
informer's transform or handler raised on (``Informer.handler_errors``; the informer's log line
names the object, and the object is taken again at its next change or list). The controller, the
Slurm bridge, the simulated detector fleet and the approval example export it under this one
name and meaning, so one dashboard panel and one alert cover them all; any increase is a bug.

``autoclusters_informer_lists_total{informer,reason}`` counts the lists each informer made, by why
(``Informer.lists``; reasons ``kube.informer.LIST_REASONS``): ``initial`` at its start,
``expired`` after a watch answered 410 Gone (etcd compacted past its version, or the API server's
watch cache no longer holds it), ``error`` after any other failure of the list or watch (the API
server restarted or unreachable). A rise of ``expired`` or ``error`` is the API server or etcd
going away and coming back, not a bug; each list reads the whole collection.

Two forms of them: ``text_lines`` for an endpoint written with the standard library (the
detector's: ``prometheus_client`` is a third of its memory budget), and ``InformerMetrics``, a
collector for a ``prometheus_client`` registry (the library is imported only when it collects).
Both read ``Informer.handler_errors`` at scrape time: the informer's count is the one source,
so no process keeps a second counter beside it, and every informer is exported from its start,
at 0 until its first error (and every reason of its lists, at 0 until its first such list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoclusters.kube.informer import Informer

NAME = "autoclusters_informer_handler_errors"  # a counter: exported as NAME_total
HELP = ("Changes of one object an informer's callback raised on (the object is taken again at its next "
        "change or list; the log names it)")
LABEL = "informer"  # the informer's name
LISTS = "autoclusters_informer_lists"  # a counter: exported as LISTS_total
LISTS_HELP = ("Lists an informer made, by why (initial: its start; expired: a watch answered 410 Gone; error: any "
              "other failure)")
REASON = "reason"


def escape_label(value: str) -> str:
    """A label value as Prometheus' text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def text_lines(informers: Iterable[Informer]) -> list[str]:
    """The counters in Prometheus' text format, one sample per informer (and reason of its lists)."""
    informers = list(informers)
    lines = [f"# HELP {NAME}_total {HELP}", f"# TYPE {NAME}_total counter"]
    for informer in informers:
        lines.append(f'{NAME}_total{{{LABEL}="{escape_label(informer.name)}"}} {informer.handler_errors}')
    lines += [f"# HELP {LISTS}_total {LISTS_HELP}", f"# TYPE {LISTS}_total counter"]
    for informer in informers:
        for reason, count in informer.lists.items():
            lines.append(f'{LISTS}_total{{{LABEL}="{escape_label(informer.name)}",{REASON}="{reason}"}} {count}')
    return lines


class InformerMetrics:
    """A ``prometheus_client`` collector reading each informer's ``handler_errors`` and ``lists``
    at scrape time."""

    def __init__(self, informers: Callable[[], Iterable[Informer]]) -> None:
        self.informers = informers

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(NAME, HELP, labels=[LABEL])
        for informer in self.informers():
            family.add_metric([informer.name], informer.handler_errors)
        yield family
        lists = CounterMetricFamily(LISTS, LISTS_HELP, labels=[LABEL, REASON])
        for informer in self.informers():
            for reason, count in informer.lists.items():
                lists.add_metric([informer.name, reason], count)
        yield lists
