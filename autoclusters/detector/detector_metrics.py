"""A small Prometheus text endpoint for the agent (``--metrics-port``).

Written with the standard library: ``prometheus_client`` adds about 12 MB to the
process, a third of the agent's memory budget, for a few gauges and two counters.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from autoclusters.detector.agent import NodeAgent
from autoclusters.detector.source_records import SourceStatus
from autoclusters.detector.writer import ConditionWriter
from autoclusters.kube.informer_metrics import escape_label, text_lines

if TYPE_CHECKING:
    from autoclusters.kube.informer import Informer


def render(agents: Iterable[NodeAgent], writer: ConditionWriter, now: float, *,
           informers: Iterable[Informer] = (), poll_errors: int | None = None) -> str:
    """The exposition text for the agents' current state. A process that runs informers (the
    simulated fleet) adds their handler errors; its loop (``NodeLoop`` on a node, the simulated
    fleet) its polls that raised."""
    faults: Counter[tuple[str, str]] = Counter()
    unreadable: Counter[str] = Counter()
    unknown: Counter[tuple[str, str]] = Counter()
    states: Counter[tuple[str, str]] = Counter()
    blind: Counter[str] = Counter()
    nodes = 0
    for agent in agents:
        nodes += 1
        unknown.update(agent.unknown_codes)
        for a in agent.tracker.confirmed(now):
            faults[(str(a.record.fault_class), "confirmed")] += 1
        for a in agent.tracker.pending(now):
            faults[(str(a.record.fault_class), "pending")] += 1
        for source in agent.tracker.source_errors:
            unreadable[source] += 1
        for source, st in agent.states.items():
            states[(source, str(st.status))] += 1
            blind[source] += int(st.status == SourceStatus.UNAVAILABLE and st.expected)
    lines = [
        "# HELP autoclusters_detector_nodes Nodes this process reports on.",
        "# TYPE autoclusters_detector_nodes gauge",
        f"autoclusters_detector_nodes {nodes}",
        "# HELP autoclusters_detector_active_faults Active fatal faults, inside the window (pending) or past it.",
        "# TYPE autoclusters_detector_active_faults gauge",
    ]
    for (fc, state), n in sorted(faults.items()):
        lines.append(f'autoclusters_detector_active_faults{{class="{escape_label(fc)}",state="{state}"}} {n}')
    lines += ["# HELP autoclusters_detector_unreadable_sources Nodes on which a fault source cannot be read.",
              "# TYPE autoclusters_detector_unreadable_sources gauge"]
    for source, n in sorted(unreadable.items()):
        lines.append(f'autoclusters_detector_unreadable_sources{{source="{escape_label(source)}"}} {n}')
    lines += ["# HELP autoclusters_detector_unknown_codes_total Faults of a code the fault catalog does not list "
              "(reported, not repaired), by class and code, once per fault and boot.",
              "# TYPE autoclusters_detector_unknown_codes_total counter"]
    for (fc, code), n in sorted(unknown.items()):
        lines.append(f'autoclusters_detector_unknown_codes_total{{class="{escape_label(fc)}",'
                     f'code="{escape_label(code)}"}} {n}')
    # Every state of every source, 0 included, so an alert can say == 1 and a change is a change of value.
    lines += ["# HELP autoclusters_detector_source_state Nodes whose fault source is in this state (on, off by "
              "configuration, unavailable); on a node's detector 1 for the source's state, 0 for the others.",
              "# TYPE autoclusters_detector_source_state gauge"]
    for source in sorted(blind):
        for status in SourceStatus:
            lines.append(f'autoclusters_detector_source_state{{source="{escape_label(source)}",'
                         f'state="{status}"}} {states[(source, str(status))]}')
    lines += ["# HELP autoclusters_detector_expected_source_unavailable Nodes whose hardware implies this fault "
              "source (NVML on a GPU node) and on which it is unavailable: a blind spot.",
              "# TYPE autoclusters_detector_expected_source_unavailable gauge"]
    for source, n in sorted(blind.items()):
        lines.append(f'autoclusters_detector_expected_source_unavailable{{source="{escape_label(source)}"}} {n}')
    lines += ["# HELP autoclusters_detector_condition_writes_total Condition patches written.",
              "# TYPE autoclusters_detector_condition_writes_total counter",
              f"autoclusters_detector_condition_writes_total {writer.writes}",
              "# HELP autoclusters_detector_condition_write_failures_total Condition patches that failed.",
              "# TYPE autoclusters_detector_condition_write_failures_total counter",
              f"autoclusters_detector_condition_write_failures_total {writer.failures}"]
    if poll_errors is not None:
        lines += ["# HELP autoclusters_detector_poll_errors_total Polls of one node that raised (the log names "
                  "the node; it is polled again at the next round).",
                  "# TYPE autoclusters_detector_poll_errors_total counter",
                  f"autoclusters_detector_poll_errors_total {poll_errors}"]
    informers = list(informers)
    if informers:
        lines += text_lines(informers)
    return "\n".join(lines) + "\n"


def serve(port: int, text: Callable[[], str], host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serves ``/metrics`` (and ``/healthz``) on a daemon thread; returns the server to shut down."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype = text().encode(), "text/plain; version=0.0.4"
            elif self.path == "/healthz":
                body, ctype = b"ok\n", "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
