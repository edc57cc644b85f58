"""What the unit tests of the providers that reset through a remote API (redfish, ec2) share."""

from __future__ import annotations

import socket
import time
from typing import Any

from autoclusters.controller.statemachine import Operation, ProviderView
from autoclusters.providers.remote_reset import RemoteReset


def wait_verdict(provider: RemoteReset, op: Operation, node: str, lookup: Any) -> ProviderView:
    """The operation's thread ends (its result recorded); then the provider's verdict."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with provider._lock:
            if provider._results.get(op.id) is not None:
                break
        time.sleep(0.05)
    return provider.progress(op, node, "p", lookup)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connections are refused
