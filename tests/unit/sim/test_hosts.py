"""The simulated hosts: which completed pods reboot which kwok node, and only once; the reboot
stages kwok plays read and remove the annotations written here (the stages are YAML for kwok,
so this is where their names are proven equal)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

from autoclusters.names import Names
from autoclusters.providers.hostreboot import REBOOT_COMMAND
from autoclusters.sim.hosts import (
    KWOK_STAGES,
    REBOOT,
    REBOOT_UNTIL,
    REBOOTED_BY,
    reboot_request,
    reboots_due,
    runs_reboot,
)
from autoclusters.sim.nodes import gpu_node_manifest
from tests.unit.controller.harness import KwokReboots


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


def _stages() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(KWOK_STAGES.read_text()) if d}


def _selects(stage: dict[str, Any]) -> dict[str, str]:
    return {e["key"]: e["operator"] for e in stage["spec"]["selector"]["matchExpressions"]}


def test_the_reboot_stages_read_and_remove_the_request() -> None:
    stages = _stages()
    down, up = stages["autoclusters-host-reboot-down"], stages["autoclusters-host-reboot-up"]
    key = f'.metadata.annotations["{REBOOT}"]'
    assert _selects(down)[key] == _selects(up)[key] == "Exists"
    for name in ("autoclusters-node-initialize", "autoclusters-node-heartbeat"):
        assert _selects(stages[name])[key] == "DoesNotExist"  # a rebooting host posts no status
    delay = up["spec"]["delay"]
    assert delay["durationFrom"] == {"jq": {"expression": f'.metadata.annotations["{REBOOT_UNTIL}"]'}}
    assert delay["durationMilliseconds"] == KwokReboots.DEFAULT_SECONDS * 1000  # a pod's reboot names no end
    meta, status = up["spec"]["next"]["patches"]  # the request removed before the host is Ready again
    assert meta["root"] == "metadata" and status["root"] == "status"
    assert yaml.safe_load(meta["template"]) == {"annotations": {REBOOT: None, REBOOT_UNTIL: None}}
    assert not any("kwok.x-k8s.io/status" in yaml.safe_dump(s) for s in stages.values())


def test_a_reboot_request_names_its_end_as_go_parses_rfc3339() -> None:
    until = datetime(2026, 1, 1, 12, 0, 30, 250000, tzinfo=UTC)
    assert reboot_request("op-1", until) == {REBOOT: "op-1", REBOOT_UNTIL: "2026-01-01T12:00:30.250000Z"}


def test_the_boot_id_after_a_reboot_comes_from_the_request() -> None:
    """One request, one boot: the same request always gives the same new boot id (a stage
    kwok plays twice boots the host once), two requests give two."""
    from autoclusters.sim.hosts import boot_id_after

    assert boot_id_after("rec-1-1") == boot_id_after("rec-1-1")
    assert boot_id_after("rec-1-1") != boot_id_after("rec-1-2")
    assert len(boot_id_after("x")) == 32 and int(boot_id_after("x"), 16) >= 0
