"""Providers without a cluster: the host-reboot Job's shape and life, the simulated provider's
reset (one request; the simulated host does the rest) and its refusal of real nodes, the
registry's checks of what only the controller can judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoclusters.allow_lists import AllowLists
from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.deploy.providers import ProviderSpec, ProviderType, parse_provider_choice
from autoclusters.names import Names
from autoclusters.providers.base import ProviderError
from autoclusters.providers.hostreboot import REBOOT_COMMAND, HostRebootProvider, job_name, reboot_job
from autoclusters.providers.registry import BuildContext, build_provider
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from autoclusters.sim.hosts import REBOOT, REBOOT_UNTIL
from autoclusters.sim.nodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE
from autoclusters.sim.provider import ANN_FAIL_RESET, ANN_OPERATION, ANN_STARTED, SimulatedProvider
from tests.unit import builders
from tests.unit.controller.harness import KwokReboots
from tests.unit.fakeapi import FakeApi

NAMES = Names()
REPO = Path(__file__).resolve().parents[3]


def gpu_node(name: str, boot: str = "boot-1", ready: bool = True, kwok: bool = False) -> dict[str, Any]:
    return builders.node(name, pool="", detected=False, boot_id=boot, ready=ready,
                         annotations={KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE} if kwok else None)


@pytest.fixture
def env() -> tuple[FakeClock, FakeApi, HostRebootProvider, Operation]:
    clock = FakeClock()
    api = FakeApi(clock=clock.now)
    api.put("/api/v1/nodes", gpu_node("n1"))
    provider = HostRebootProvider(api.kube(), clock, NAMES, namespace="autoclusters-system", image="img:1", timeout=60)
    op = Operation("n1-abc-1", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    return clock, api, provider, op


def _creates(api: FakeApi) -> int:
    return api.counts()[("POST", "jobs")]


def _gets(api: FakeApi, since: int = 0) -> list[str]:
    """The paths read, from request number ``since`` on."""
    return [r.path for r in api.requests[since:] if r.verb == "GET"]


def test_reboot_job_runs_as_root_whatever_user_the_image_names() -> None:
    """The image runs as 65532 (Containerfile USER); a privileged container under that user has no
    effective capability, so nsenter into PID 1 fails. The Job must name uid 0 itself."""
    image_user = next(line.split()[1] for line in (REPO / "Containerfile").read_text().splitlines()
                      if line.startswith("USER "))
    assert image_user.split(":")[0] != "0"  # what makes the override necessary
    op = Operation("rec-1", RepairAction.RESET, FakeClock().now())
    pod = reboot_job(op, "gpu-7", "ns", "img:1", 600, NAMES)["spec"]["template"]["spec"]
    ctx = pod["containers"][0]["securityContext"]
    assert ctx["runAsUser"] == 0 and ctx["runAsNonRoot"] is False and ctx["privileged"] is True
    assert "securityContext" not in pod or pod["securityContext"].get("runAsNonRoot") is not True


def _job_path(op: Operation) -> str:
    return f"/apis/batch/v1/namespaces/autoclusters-system/jobs/{job_name(op)}"


def test_reboot_job_is_pinned_privileged_and_never_retried() -> None:
    op = Operation("rec-1", RepairAction.RESET, FakeClock().now())
    job = reboot_job(op, "gpu-7", "ns", "img:1", 600, NAMES)
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 600
    assert pod["nodeName"] == "gpu-7" and pod["hostPID"] is True and pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == [{"operator": "Exists"}]  # the maintenance taint, the cordon, NotReady
    container = pod["containers"][0]
    assert container["image"] == "img:1"
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}
    assert container["command"] == list(REBOOT_COMMAND) and container["command"][:3] == ["nsenter", "--target", "1"]
    assert job["metadata"]["annotations"]["remediation.autoclusters.io/operation"] == "rec-1"
    assert job_name(op) == reboot_job(op, "other", "ns", "x", 1, NAMES)["metadata"]["name"]  # from the op id


def test_drive_creates_one_job_per_operation(env) -> None:
    _clock, api, provider, op = env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.NOT_STARTED
    provider.drive(op, "n1", "p")
    provider.drive(op, "n1", "p")  # a retry, or a restarted controller: the same Job
    assert _creates(api) == 1 and api.read(_job_path(op)) is not None
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING


def test_a_poll_reads_the_job_once_and_a_job_deleted_by_hand_is_looked_for_again(env) -> None:
    """Each poll looks (progress) and then drives: the drive does not read the Job the look
    just found (nor, then, the node)."""
    _clock, api, provider, op = env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    provider.drive(op, "n1", "p")
    since = len(api.requests)
    for _ in range(3):
        assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING
        provider.drive(op, "n1", "p")
    assert _gets(api, since) == [_job_path(op)] * 3
    api.remove(_job_path(op))  # by hand, before the host rebooted
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.NOT_STARTED
    provider.drive(op, "n1", "p")
    assert _creates(api) == 2 and api.read(_job_path(op)) is not None  # the reboot is asked for again, as before


def test_new_boot_id_and_ready_succeeds_and_deletes_the_job(env) -> None:
    _clock, api, provider, op = env
    provider.drive(op, "n1", "p")
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    api.put("/api/v1/nodes", gpu_node("n1", boot="boot-2", ready=False))
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING  # rebooted, not Ready yet
    api.put("/api/v1/nodes", gpu_node("n1", boot="boot-2"))
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.SUCCEEDED
    assert api.read(_job_path(op)) is None
    provider.drive(op, "n1", "p")  # after the cleanup a late drive does not reboot again
    assert _creates(api) == 1


def test_a_job_the_reboot_itself_ended_is_not_a_failure(env) -> None:
    """A host can go down before its kubelet reports the command's exit: after the boot the
    Job's pod is failed (exit 255, reason Unknown), but the reboot happened, so the node's return
    decides. A Job that failed with the old boot id is still a failure."""
    _clock, api, provider, op = env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    provider.drive(op, "n1", "p")
    api.edit(_job_path(op), lambda j: j.update(status={"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}))
    api.put("/api/v1/nodes", gpu_node("n1", boot="boot-2", ready=False))
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING
    api.put("/api/v1/nodes", gpu_node("n1", boot="boot-2"))
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.SUCCEEDED
    assert api.read(_job_path(op)) is None
    other = Operation("n1-abc-2", RepairAction.RESET, _clock.now(), boot_id_before="boot-2")
    provider.drive(other, "n1", "p")
    api.edit(_job_path(other), lambda j: j.update(status={"conditions": [{"type": "Failed", "status": "True"}]}))
    api.put("/api/v1/nodes", gpu_node("n1", boot="boot-2"))
    assert provider.progress(other, "n1", "p", lookup).state == ProviderState.FAILED


def test_timeout_fails_and_deletes_the_job(env) -> None:
    clock, api, provider, op = env
    provider.drive(op, "n1", "p")
    clock.advance(61)
    view = provider.progress(op, "n1", "p", lambda n: api.read(f"/api/v1/nodes/{n}"))
    assert view.state == ProviderState.FAILED and "60s" in view.message and "BMC" in view.message
    assert api.read(_job_path(op)) is None  # it cannot reboot the node later


def test_host_reboot_needs_an_image() -> None:
    clock = FakeClock()
    with pytest.raises(ProviderError, match=r"provider\.hostReboot\.image"):
        HostRebootProvider(FakeApi().kube(), clock, NAMES, namespace="ns", image="")


def test_simulated_provider_refuses_nodes_the_simulator_does_not_manage() -> None:
    clock = FakeClock()
    provider = SimulatedProvider(FakeApi().kube(), clock, NAMES)
    assert provider.refusal(gpu_node("kwok-1", kwok=True)) == ""
    why = provider.refusal(gpu_node("dgx-042"))
    assert "dgx-042" in why and KWOK_NODE_ANNOTATION in why and "simulated provider" in why


@pytest.fixture
def sim_env() -> tuple[FakeClock, FakeApi, SimulatedProvider, Operation]:
    clock = FakeClock()
    api = FakeApi(clock=clock.now)
    api.put("/api/v1/nodes", gpu_node("n1", kwok=True))
    provider = SimulatedProvider(api.kube(), clock, NAMES, reset_seconds=30)
    return clock, api, provider, Operation("n1-abc-1", RepairAction.RESET, clock.now(), boot_id_before="boot-1")


def test_a_simulated_reset_is_one_request_and_the_simulated_host_finishes_it(sim_env) -> None:
    clock, api, provider, op = sim_env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    host = KwokReboots(api, clock)
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.NOT_STARTED
    provider.drive(op, "n1", "p")
    provider.drive(op, "n1", "p")  # a retry, or a restarted controller: nothing more
    writes = lambda: [(r.verb, r.resource) for r in api.requests if r.verb != "GET"]  # noqa: E731
    assert writes() == [("PATCH", "nodes")]  # the reads: no informer cache here, the controller has one
    ann = (api.read("/api/v1/nodes/n1") or {})["metadata"]["annotations"]
    assert ann[REBOOT] == op.id and ann[REBOOT_UNTIL] == "2026-01-01T00:00:30.000000Z"
    running = ProviderView(ProviderState.RUNNING, shows_on_node=True)  # its end is the node's change: no poll
    assert provider.progress(op, "n1", "p", lookup) == running
    host.play()  # the host goes down at once ...
    clock.advance(29)
    host.play()  # ... and stays down until the time asked for
    assert provider.progress(op, "n1", "p", lookup) == running
    clock.advance(1)
    assert provider.progress(op, "n1", "p", lookup) == running  # the time is past, the node not changed yet
    host.play()
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.SUCCEEDED
    restarted = SimulatedProvider(api.kube(), clock, NAMES, reset_seconds=30)  # the record is on the node
    assert restarted.progress(op, "n1", "p", lookup).state == ProviderState.SUCCEEDED
    restarted.drive(op, "n1", "p")  # a late drive does not reset again
    assert writes() == [("PATCH", "nodes")] and host.reboots == 1


def test_a_simulated_reset_is_done_only_with_a_new_boot_id(sim_env) -> None:
    clock, api, provider, op = sim_env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    provider.drive(op, "n1", "p")

    def drop_request(n: dict[str, Any]) -> None:
        n["metadata"]["annotations"].pop(REBOOT)

    api.edit("/api/v1/nodes/n1", drop_request)  # the request gone, the host never rebooted
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING
    later = Operation("n1-abc-2", RepairAction.RESET, clock.now())
    assert provider.progress(later, "n1", "p", lookup).state == ProviderState.NOT_STARTED  # another operation's


def test_a_simulated_reset_judges_the_boot_id_by_the_operation_the_node_keeps_no_copy(sim_env) -> None:
    _clock, api, provider, op = sim_env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    provider.drive(op, "n1", "p")
    ann = (api.read("/api/v1/nodes/n1") or {})["metadata"]["annotations"]
    sim_keys = {k for k in ann if k.startswith("sim.autoclusters.io/")}
    assert sim_keys == {ANN_OPERATION, ANN_STARTED, REBOOT, REBOOT_UNTIL}  # no boot id of its own
    api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].pop(REBOOT))  # bootID still boot-1
    assert provider.progress(op, "n1", "p", lookup).state == ProviderState.RUNNING
    recorded = Operation(op.id, op.action, op.started, boot_id_before="boot-0")  # the record saw another boot
    assert provider.progress(recorded, "n1", "p", lookup).state == ProviderState.SUCCEEDED


def test_a_simulated_reset_fails_on_request_and_when_the_node_goes(sim_env) -> None:
    _clock, api, provider, op = sim_env
    lookup = lambda n: api.read(f"/api/v1/nodes/{n}")  # noqa: E731
    api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update({ANN_FAIL_RESET: "true"}))
    provider.drive(op, "n1", "p")
    assert REBOOT not in (api.read("/api/v1/nodes/n1") or {})["metadata"]["annotations"]  # no reboot asked for
    view = provider.progress(op, "n1", "p", lookup)
    assert view.state == ProviderState.FAILED and "failure requested" in view.message
    api.remove("/api/v1/nodes/n1")
    view = provider.progress(op, "n1", "p", lookup)
    assert view.state == ProviderState.FAILED and "disappeared" in view.message


def test_registry_builds_each_type_and_refuses_what_only_the_controller_can_judge() -> None:
    clock = FakeClock()
    lists = AllowLists(commands={"true": ("true",), "fix": ("/nonexistent/fix-node",)})
    ctx = BuildContext(FakeApi().kube(), clock, NAMES, image="img:1", allow_lists=lists)
    for raw in ({"type": "simulated"}, {"type": "clusterapi"}, {"type": "hostReboot"},
                {"type": "command", "command": {"command": ["true"]}}):
        spec = parse_provider_choice(raw).default
        assert spec is not None and build_provider(spec, ctx).name == raw["type"]
    missing = ProviderSpec(ProviderType.COMMAND, {"command": ["/nonexistent/fix-node"], "timeoutSeconds": 5})
    with pytest.raises(ProviderError, match=r"provider.command.command\[0\] '/nonexistent/fix-node'"):
        build_provider(missing, ctx)

