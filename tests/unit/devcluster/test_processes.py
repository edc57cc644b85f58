"""Port picking for the local cluster's processes (devcluster/processes.py)."""

from __future__ import annotations

import socket

from autoclusters.devcluster.processes import free_ports


def test_ports_picked_together_are_distinct_and_bindable() -> None:
    """The local cluster gives seven listeners their ports in one call; a repeat among them
    would make one of its processes exit with "address already in use"."""
    for _ in range(50):
        ports = free_ports(7)
        assert len(set(ports)) == 7, ports
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in socks:
            s.close()
