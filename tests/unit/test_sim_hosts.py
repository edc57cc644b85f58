"""The simulated hosts: which completed pods reboot which kwok node, and only once."""

from __future__ import annotations

from typing import Any

from autoclusters.names import Names
from autoclusters.providers.hostreboot import REBOOT_COMMAND
from autoclusters.sim.hosts import REBOOTED_BY, reboots_due, runs_reboot
from autoclusters.sim.nodes import gpu_node_manifest


def pod(uid: str, node: str, command: list[str], phase: str = "Succeeded") -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node, "containers": [{"command": command}]},
            "status": {"phase": phase}}


def test_the_host_reboot_providers_command_is_a_reboot() -> None:
    assert runs_reboot(pod("u", "n", list(REBOOT_COMMAND)))
    assert not runs_reboot(pod("u", "n", ["sleep", "10"]))
    assert not runs_reboot(pod("u", "n", ["echo", "no-reboot"]))


def test_only_completed_reboots_on_kwok_nodes_and_only_once() -> None:
    kwok = gpu_node_manifest("kwok-1", "p", Names())
    real = {"metadata": {"name": "dgx-1", "annotations": {}}}
    nodes = {"kwok-1": kwok, "dgx-1": real}
    pods = [pod("a", "kwok-1", list(REBOOT_COMMAND)), pod("b", "dgx-1", list(REBOOT_COMMAND)),
            pod("c", "kwok-1", list(REBOOT_COMMAND), phase="Running"), pod("d", "kwok-1", ["true"])]
    assert reboots_due(pods, nodes) == [("kwok-1", "a")]
    kwok["metadata"]["annotations"][REBOOTED_BY] = "a"
    assert reboots_due(pods, nodes) == []  # the same pod seen again does not reboot the node twice
