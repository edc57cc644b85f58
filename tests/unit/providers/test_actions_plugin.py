"""A provider and an action kind registered from this test module, with no edit to the
controller: a single-GPU reset (``gpuReset``) carried out by a test-only provider.

The registration is what a new provider module does: an ``ActionKind`` in the action table
(``providers/actions.py``), a ``ProviderKind`` (``deploy/providers.py``, ``register_provider``)
and a builder (``providers/registry.py``). The CRD schema, the strict pool parser and the
controller's roles pick them up, and the state machine, driven through the deterministic
harness, carries a gpuReset out (and escalates a failed one by the table) as it does a reset;
the provider's credentials Secret becomes a rule of the Role and its node guard is written on
its nodes while they are marked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from autoclusters import names as n
from autoclusters.deploy import crds
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.providers import (
    ProviderKind,
    ProviderSettingsError,
    Rule,
    Setting,
    parse_provider_choice,
    register_provider,
    unregister_provider,
)
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfigError, pool_from_config
from autoclusters.providers.actions import ACTIONS, ActionKind, Deadline, Proof
from autoclusters.providers.base import BuildContext, NodeLookup, Provider
from autoclusters.providers.declaration import CredentialSource, NodeGuard
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from tests.unit.controller.harness import Harness

GPU_RESET = "gpuReset"
TEST_PROVIDER = "testGpuReset"
RULE = Rule("gpu.example.com", "gpuresets", ("create", "get"))
SECRET = "test-gpu-reset-credentials"
GUARD = NodeGuard("gpu.example.com/fleet", ("gpu.example.com/do-not-drain",))  # its backend's own hands-off mark


class GpuResets(Provider):
    """Resets one GPU: the test decides whether the backend says it worked."""

    name = TEST_PROVIDER

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.driven: list[tuple[str, str, str]] = []  # (operation id, action, node)

    def drive(self, op: Operation, node: str, pool: str) -> None:
        if (op.id, op.action, node) not in self.driven:  # idempotent per operation id
            self.driven.append((op.id, op.action, node))

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        if not any(d[0] == op.id for d in self.driven):
            return ProviderView()
        if self.fail:
            return ProviderView(ProviderState.FAILED, "the GPU did not come back")
        return ProviderView(ProviderState.SUCCEEDED, "GPU reset")

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""

    def refusal(self, node: dict[str, Any] | None) -> str:
        return ""


BUILT: list[GpuResets] = []


def _build(settings: Mapping[str, Any], context: BuildContext) -> Provider:
    BUILT.append(GpuResets(fail=bool(settings["fail"])))
    return BUILT[-1]


@pytest.fixture
def plugin() -> Iterator[None]:
    ACTIONS.register(ActionKind(GPU_RESET, "single-GPU reset", "GPU reset", "reset", "resetting the GPU",
                                Proof.CLEARED, Deadline.RESET, escalates_to="reset", every_pool=False))
    register_provider(ProviderKind(TEST_PROVIDER, (GPU_RESET,), "Resets one GPU (a test's provider).",
                                   (Setting("fail", "boolean", "The reset fails.", default=False),
                                    Setting("gpus", "integer", "GPUs reset at once.", minimum=1, default=1)),
                                   rules=(RULE,), credentials=CredentialSource(secret=SECRET), guards=(GUARD,),
                                   build=_build))
    BUILT.clear()
    try:
        yield
    finally:
        unregister_provider(TEST_PROVIDER)
        ACTIONS.unregister(GPU_RESET)


def _provider_schema() -> dict[str, Any]:
    return crds.pool_schema()["properties"]["spec"]["properties"]["provider"]


def _granted(rules: list[dict[str, Any]]) -> set[str]:
    return {v for r in rules if r["apiGroups"] == [RULE.group] and RULE.resource in r["resources"] for v in r["verbs"]}


def test_the_crd_the_parser_and_the_roles_pick_up_a_registered_provider_and_action(plugin: None) -> None:
    schema = _provider_schema()
    assert TEST_PROVIDER in schema["properties"]["type"]["enum"]
    assert set(schema["properties"][TEST_PROVIDER]["properties"]) == {"fail", "gpus"}
    assert schema["properties"][GPU_RESET]["properties"]["type"]["enum"] == [TEST_PROVIDER]  # its one provider
    assert GPU_RESET in crds.pool_schema()["properties"]["spec"]["properties"]["repairCodes"][
        "additionalProperties"]["enum"]
    assert GPU_RESET in crds.remediation_schema()["properties"]["spec"]["properties"]["action"]["enum"]

    choice = parse_provider_choice({"type": "simulated", GPU_RESET: {"type": TEST_PROVIDER}})
    spec = choice.for_action(GPU_RESET)
    assert spec is not None and spec.type == TEST_PROVIDER and dict(spec.settings) == {"fail": False, "gpus": 1}
    assert choice.to_dict()[GPU_RESET] == {"type": TEST_PROVIDER, TEST_PROVIDER: {"fail": False, "gpus": 1}}
    assert choice.missing() == ()  # an optional action: the pool needs no provider for it
    with pytest.raises(ProviderSettingsError, match=rf"provider.{GPU_RESET}.{TEST_PROVIDER}.gpus must be an "):
        parse_provider_choice({GPU_RESET: {"type": TEST_PROVIDER, TEST_PROVIDER: {"gpus": 0}}})
    with pytest.raises(ProviderSettingsError, match=f"hostReboot cannot {GPU_RESET} a node"):
        parse_provider_choice({GPU_RESET: {"type": "hostReboot"}})
    pool = pool_from_config({"name": "p", "repairCodes": {"gpu:79": GPU_RESET},
                             "provider": {"type": "simulated", GPU_RESET: {"type": TEST_PROVIDER}}})
    assert pool.repair_codes == {"gpu:79": GPU_RESET}

    cluster_role, _, role, *_ = controller_rbac(Names())
    assert _granted(cluster_role["rules"]) == set(RULE.verbs) and _granted(role["rules"]) == set()
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [SECRET]} in role["rules"]


def test_without_the_registration_none_of_it_is_there() -> None:
    """The other side of the test above: what it finds comes from the registration."""
    schema = _provider_schema()
    assert TEST_PROVIDER not in schema["properties"] and GPU_RESET not in schema["properties"]
    with pytest.raises(ProviderSettingsError, match="unknown key"):
        parse_provider_choice({"type": "simulated", GPU_RESET: {"type": TEST_PROVIDER}})
    with pytest.raises(PoolConfigError, match=re.escape("repairCodes.gpu:79 must be one of reset|replace,")):
        pool_from_config({"name": "p", "repairCodes": {"gpu:79": GPU_RESET}})
    cluster_role, _, role, *_ = controller_rbac(Names())
    assert _granted(cluster_role["rules"]) == set() and SECRET not in str(role["rules"])


def _gpu_reset_pool(h: Harness, *, fail: bool) -> None:
    h.pool("p", repairCodes={"gpu:79": GPU_RESET},
           provider={"type": "simulated", GPU_RESET: {"type": TEST_PROVIDER, TEST_PROVIDER: {"fail": fail}}})


def test_the_state_machine_carries_out_a_registered_action(plugin: None) -> None:
    h = Harness()
    _gpu_reset_pool(h, fail=False)
    h.node("n1", **{GUARD.label: "a"})
    h.start()
    boot = h.boot_id("n1")
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Verifying", detector=False)
    [provider] = BUILT
    record = h.records("n1")[0]
    assert record["spec"]["action"] == GPU_RESET and record["status"]["operation"]["action"] == GPU_RESET
    assert provider.driven == [(f"{record['metadata']['name']}-1", GPU_RESET, "n1")]
    node = h.node_obj("n1")
    assert node is not None and node["spec"].get("unschedulable") is True  # drained as for a reset
    assert node["metadata"]["annotations"][GUARD.annotations[0]] == "true"  # its node guard, while marked
    h.clear_fault("n1")  # the GPU is back: the detector clears its condition, with no reboot
    h.run(lambda: h.phase("n1") == "Succeeded", detector=False)
    assert h.phase("n1") == "Succeeded" and h.boot_id("n1") == boot
    [done] = h.events(n.EVENT_SUCCEEDED)
    assert done["message"] == "Single-GPU reset succeeded: the node is Ready and reports no gpu fault."
    node = h.node_obj("n1")
    assert node is not None and not node["spec"].get("unschedulable")
    assert GUARD.annotations[0] not in (node["metadata"].get("annotations") or {})  # removed with the marking
    h.stop()


def test_a_failed_registered_action_escalates_as_the_table_says(plugin: None) -> None:
    h = Harness()
    _gpu_reset_pool(h, fail=True)
    h.node("n1")
    h.start()
    boot = h.boot_id("n1")
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    [record] = h.records("n1")
    assert record["status"]["action"] == "reset" and record["status"]["escalated"] is True
    [failed] = [e for e in h.events(n.EVENT_FAILED) if e["message"].startswith("Single-GPU reset failed")]
    assert "the GPU did not come back" in failed["message"]
    [escalated] = h.events(n.EVENT_ESCALATED)
    assert escalated["message"].endswith("VM reset follows under the same approval.")
    assert h.boot_id("n1") != boot  # the escalation's reset (the simulated provider) rebooted the node
    h.stop()


def test_the_state_machine_names_no_action() -> None:
    """Every answer about an action comes from the table: the state machine's code names neither
    ``RepairAction`` nor an action's name (so a registered action needs no branch there)."""
    import ast
    from pathlib import Path

    import autoclusters.controller.statemachine as sm

    tree = ast.parse(Path(sm.__file__).read_text())
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    words = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert "RepairAction" not in named
    assert not words & set(ACTIONS.names())
