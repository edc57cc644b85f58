"""Prometheus metrics of the controller, in a registry of its own (several controllers may
share a test process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

from autoclusters.kube import informer_metrics

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
        self.breaker_open = Gauge("autoclusters_circuit_breaker_open", "1 while a pool's circuit breaker is open",
                                  ["pool"], registry=r)
        self.queue_depth = Gauge("autoclusters_workqueue_depth", "Keys waiting in the work queue", registry=r)
        self.reconcile_errors = Counter("autoclusters_reconcile_errors_total", "Reconciles that failed and backed off",
                                        registry=r)
        self.reconciles = Counter("autoclusters_reconciles_total", "Reconciles run, by the kind of key (node, pool)",
                                  ["kind"], registry=r)
        # the name every process with informers exports, read from the informers at each scrape
        # (the manager names them: ``informer_errors.informers``)
        self.informer_errors = informer_metrics.HandlerErrors(lambda: ())
        r.register(self.informer_errors)
        self.is_leader = Gauge("autoclusters_controller_leader", "1 while this replica holds the lease", registry=r)
        self.shard = Gauge("autoclusters_controller_shard", "1, labelled with this process's shard and the number "
                           "of shards (sharding by pool; 0 of 1 when not sharded)", ["shard", "shards"], registry=r)

    def count_requests(self, counts: RequestCounts) -> None:
        """Exports ``autoclusters_controller_api_requests_total{component, verb, resource}``,
        read from ``counts`` (the client's request counter) at each scrape."""
        self.registry.register(_RequestsCollector(counts))

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)


class _RequestsCollector:
    def __init__(self, counts: RequestCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("autoclusters_controller_api_requests",
                                     "API requests this process has made, by the part that sent them "
                                     "(controller, leader-election, provider/<type>), verb and resource",
                                     labels=["component", "verb", "resource"])
        for (component, verb, resource), n in sorted(self.counts().items()):
            family.add_metric([component, verb, resource], n)
        yield family
