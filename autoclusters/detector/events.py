"""Events for warning-severity faults: worth telling an operator, not worth a repair.

A warning is reported once per node, fault and boot (repeats of the same line add
nothing), from a background thread so a slow API server never delays polling.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from autoclusters.clock import Clock, utc_iso
from autoclusters.detector.conditions import message_for, reason_for
from autoclusters.detector.source_records import Record
from autoclusters.kube import Kube
from autoclusters.kube.errors import KubeError

log = logging.getLogger(__name__)

COMPONENT = "autoclusters-detector"


def warning_event(node: str, record: Record, namespace: str, stamp: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": reason_for(record),
        "message": message_for(record),
        "type": "Warning",
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class WarningEvents:
    def __init__(self, kube: Kube, clock: Clock, namespace: str = "default") -> None:
        self.kube = kube
        self.clock = clock
        self.namespace = namespace
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warning-events")
        self.sent = 0

    def emit(self, node: str, record: Record) -> None:
        body = warning_event(node, record, self.namespace, utc_iso(self.clock.now()))
        self._pool.submit(self._send, body)

    def _send(self, body: dict[str, object]) -> None:
        try:
            self.kube.create(f"/api/v1/namespaces/{self.namespace}/events", body)
            self.sent += 1
        except KubeError as e:
            log.warning("could not record warning event %s: %s", body.get("message"), e)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
