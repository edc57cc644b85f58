"""Prometheus metrics of the controller, in a registry of its own (several controllers may
share a test process)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from autoclusters.api import TERMINAL, FaultClass, Phase
from autoclusters.clock import parse_iso
from autoclusters.controller.remediation_record import UnreadableRecord, state_of
from autoclusters.controller.statemachine import Outcome
from autoclusters.kube import informer_metrics
from autoclusters.providers.actions import ACTIONS

RequestCounts = Callable[[], dict[tuple[str, str, str], int]]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.faults = Counter("autoclusters_faults_total", "Faults that opened a repair record, by class",
                              ["fault_class"], registry=r)
        self.repairs = Counter("autoclusters_repairs_phase_total", "Repair records entering a phase",
                               ["phase"], registry=r)
        self.outcomes = Counter("autoclusters_repairs_outcome_total", "Repairs finished, by action and outcome",
                                ["action", "outcome"], registry=r)
        self.phase_seconds = Histogram("autoclusters_repair_phase_seconds", "Time a repair spent in a phase",
                                       ["phase"], registry=r,
                                       buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600))
        # Every label value is exported from the start at 0: a child created by its first
        # increment appears at 1, and increase() over a series whose first sample is 1 is 0,
        # so the first failed repair of a process would never fire the alert on it.
        for fault_class in FaultClass:
            self.faults.labels(fault_class.value)
        for phase in Phase:
            self.repairs.labels(phase.value)
        for action in ACTIONS.names():
            for outcome in Outcome:
                self.outcomes.labels(action, outcome.value)
        self.breaker_open = Gauge("autoclusters_circuit_breaker_open", "1 while a pool's circuit breaker is open",
                                  ["pool"], registry=r)
        self.queue_depth = Gauge("autoclusters_workqueue_depth", "Keys waiting in the work queue", registry=r)
        self.reconcile_errors = Counter("autoclusters_reconcile_errors_total", "Reconciles that failed and backed off",
                                        registry=r)
        self.reconciles = Counter("autoclusters_reconciles_total", "Reconciles run, by the kind of key (node, pool)",
                                  ["kind"], registry=r)
        # the name every process with informers exports, read from the informers at each scrape
        # (the manager names them: ``informer_counts.informers``)
        self.informer_counts = informer_metrics.InformerMetrics(lambda: ())
        r.register(self.informer_counts)
        # open repairs by pool and phase, read from the record cache at each scrape (the manager
        # names the records: those of this shard's pools; none on a standby, whose cache is empty)
        self.open_repairs = OpenRepairs()
        r.register(self.open_repairs)
        self.is_leader = Gauge("autoclusters_controller_leader", "1 while this replica holds the lease", registry=r)
        self.shard = Gauge("autoclusters_controller_shard", "1, labelled with this process's shard and the number "
                           "of shards (sharding by pool; 0 of 1 when not sharded)", ["shard", "shards"], registry=r)

    def count_requests(self, counts: RequestCounts, throttled: RequestCounts | None = None) -> None:
        """Exports ``autoclusters_controller_api_requests_total{component, verb, resource}``,
        read from ``counts`` (the client's request counter) at each scrape, and of those the
        ones the API server's flow control refused (429 with Retry-After, each sent again after
        it), ``autoclusters_controller_api_throttled_total``, read from ``throttled``."""
        self.registry.register(_RequestsCollector(counts, throttled or dict))

    def count_fenced(self, refused: Callable[[], int]) -> None:
        """Exports ``autoclusters_controller_fenced_writes_total``: writes this replica refused
        because its lease view had expired (kube/fence.py), read at each scrape."""
        self.registry.register(_FencedCollector(refused))

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)


API_REQUESTS = "autoclusters_controller_api_requests"
API_THROTTLED = "autoclusters_controller_api_throttled"
FENCED_WRITES = "autoclusters_controller_fenced_writes"


class _FencedCollector:
    def __init__(self, refused: Callable[[], int]) -> None:
        self.refused = refused

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(FENCED_WRITES,
                                  "Writes refused because this replica's lease view had expired", value=self.refused())


class _RequestsCollector:
    def __init__(self, counts: RequestCounts, throttled: RequestCounts) -> None:
        self.counts = counts
        self.throttled = throttled

    def collect(self) -> Iterator[Metric]:
        for name, text, counts in (
                (API_REQUESTS, "API requests this process has made, by the part that sent them "
                               "(controller, leader-election, provider/<type>), verb and resource", self.counts),
                (API_THROTTLED, "API requests the API server's flow control refused with 429 (API Priority "
                                "and Fairness), each sent again after its Retry-After; by part, verb and resource",
                 self.throttled)):
            family = CounterMetricFamily(name, text, labels=["component", "verb", "resource"])
            for (component, verb, resource), n in sorted(counts().items()):
                family.add_metric([component, verb, resource], n)
            yield family


def phase_entered(record: dict[str, Any]) -> datetime | None:
    """When the record entered its current phase: its last timeline step of that phase, else
    when it was created."""
    status = record.get("status") or {}
    phase = status.get("phase")
    for step in reversed(status.get("steps") or []):
        if step.get("phase") == phase and step.get("time"):
            return parse_iso(step["time"])
    return parse_iso(status.get("created") or (record.get("metadata") or {}).get("creationTimestamp"))


def open_repairs(records: Iterable[dict[str, Any]], now: datetime) -> dict[tuple[str, str], tuple[int, float]]:
    """(pool, phase) -> (open records in that phase, seconds since the oldest of them entered
    it), over the records that are not history; a record without a phase yet is left out."""
    known = {p.value for p in Phase} - {p.value for p in TERMINAL}
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for record in records:
        phase = (record.get("status") or {}).get("phase")
        if phase not in known:
            continue
        key = ((record.get("spec") or {}).get("pool", ""), phase)
        entered = phase_entered(record)
        age = max(0.0, (now - entered).total_seconds()) if entered else 0.0
        count, oldest = out.get(key, (0, 0.0))
        out[key] = (count + 1, max(oldest, age))
    return out


class OpenRepairs:
    """``autoclusters_repairs_open{pool,phase}`` and
    ``autoclusters_repairs_open_oldest_seconds{pool,phase}``: the repairs not yet history, and
    how long the oldest has been in its phase (a repair waiting for approval, held by a guard,
    or Failed/HumanNeeded and waiting for a person shows here for as long as it waits)."""

    def __init__(self) -> None:
        self.records: Callable[[], Iterable[dict[str, Any]]] = lambda: ()
        self.now: Callable[[], datetime] = lambda: datetime.now(UTC)

    def collect(self) -> Iterator[Metric]:
        counts = GaugeMetricFamily("autoclusters_repairs_open", "Repairs not yet history, by pool and phase",
                                   labels=["pool", "phase"])
        oldest = GaugeMetricFamily("autoclusters_repairs_open_oldest_seconds",
                                   "Seconds since the oldest open repair of the pool entered the phase",
                                   labels=["pool", "phase"])
        unreadable = GaugeMetricFamily("autoclusters_remediation_records_unreadable",
                                       "Remediation records this controller cannot read (left as they are; "
                                       "their nodes' repairs are held)", labels=["pool"])
        records = list(self.records())
        for (pool, phase), (count, age) in sorted(open_repairs(records, self.now()).items()):
            counts.add_metric([pool, phase], count)
            oldest.add_metric([pool, phase], age)
        for pool, count in sorted(unreadable_records(records).items()):
            unreadable.add_metric([pool], count)
        yield counts
        yield oldest
        yield unreadable


def unreadable_records(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """pool -> how many of its records cannot be read (``remediation_record.UnreadableRecord``)."""
    out: dict[str, int] = {}
    for record in records:
        try:
            state_of(record)
        except UnreadableRecord:
            pool = str((record.get("spec") or {}).get("pool", "")) if isinstance(record.get("spec"), dict) else ""
            out[pool] = out.get(pool, 0) + 1
    return out
