"""The Slurm bridge's Prometheus metrics (``slurm-bridge run --metrics-port``).

Read from the bridge at each scrape: its polls, the actions it carried out, its errors (a
whole poll, or one node's sync: the node's events and the log name it), and its informers'
handler errors under the name every process with informers exports
(``kube/informer_metrics.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

from autoclusters.kube.informer_metrics import InformerMetrics
from autoclusters.slurm.bridge import SlurmBridge


class _BridgeCollector:
    def __init__(self, bridge: SlurmBridge) -> None:
        self.bridge = bridge

    def collect(self) -> Iterator[Metric]:
        stats = self.bridge.stats
        yield CounterMetricFamily("autoclusters_slurm_bridge_polls", "Polls of the nodes and Slurm", value=stats.polls)
        yield CounterMetricFamily("autoclusters_slurm_bridge_actions",
                                  "Actions carried out (drain, signal, requeue, ack, resume, event, patch)",
                                  value=stats.actions)
        errors = CounterMetricFamily("autoclusters_slurm_bridge_errors",
                                     "Whole polls that failed (scope=poll: the API server, sinfo, or an unexpected "
                                     "error, whose traceback is in the log) and syncs of "
                                     "one node that failed (scope=node: the log names the node, a Slurm command "
                                     "or patch that failed is also an event on it)", labels=["scope"])
        errors.add_metric(["poll"], stats.poll_errors)
        errors.add_metric(["node"], stats.node_errors)
        yield errors


def registry(bridge: SlurmBridge) -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(_BridgeCollector(bridge))
    r.register(InformerMetrics(lambda: bridge.informers))
    return r


def serve(bridge: SlurmBridge, port: int, addr: str = "0.0.0.0") -> None:
    """Serves ``/metrics`` on a daemon thread."""
    start_http_server(port, addr=addr, registry=registry(bridge))
