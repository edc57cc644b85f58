"""The host-reboot provider's command is the operator's setting (issue 26, "hostReboot on every
node OS"): the controller flag and the stack setting reach the Job, a bad value is refused where
it is given, and a Job whose command the host lacks fails with words that say what to set."""

from __future__ import annotations

from typing import Any

import pytest

from autoclusters import api
from autoclusters.api import RepairAction, host_reboot_argv
from autoclusters.clock import FakeClock
from autoclusters.deploy.providers import ProviderSpec, ProviderType
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfigError
from autoclusters.providers.hostreboot import NSENTER, REBOOT_COMMAND, HostRebootProvider, job_name, reboot_job
from autoclusters.providers.registry import BuildContext, build_provider
from autoclusters.providers.types import Operation, ProviderState
from tests.unit.fakeapi import FakeApi

NAMES = Names()
NS = "autoclusters-system"
BOTTLEROCKET = "apiclient reboot"


def test_the_default_is_the_systemd_command_and_shell_words_become_argv() -> None:
    assert host_reboot_argv(api.HOST_REBOOT_COMMAND) == ("sh", "-c", "systemctl reboot || reboot")
    assert (*NSENTER, "sh", "-c", "systemctl reboot || reboot") == REBOOT_COMMAND
    assert host_reboot_argv(BOTTLEROCKET) == ("apiclient", "reboot")
    for bad, why in (("", "empty"), ("   ", "empty"), ("sh -c 'unclosed", "not valid shell words"),
                     (None, "must be a string"), (["apiclient", "reboot"], "must be a string")):
        with pytest.raises(ValueError, match=why):
            host_reboot_argv(bad)  # type: ignore[arg-type]


def test_the_job_runs_the_operators_command_inside_the_host() -> None:
    op = Operation("rec-1", RepairAction.RESET, FakeClock().now())
    container = reboot_job(op, "br-1", NS, "img:1", 600, NAMES, ("apiclient", "reboot"))["spec"]["template"][
        "spec"]["containers"][0]
    assert container["command"] == [*NSENTER, "apiclient", "reboot"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # nsenter's words reach the status


def test_the_controllers_setting_reaches_the_provider_it_builds() -> None:
    clock = FakeClock()
    context = BuildContext(FakeApi(clock=clock.now).kube(), clock, NAMES, namespace=NS, image="img:1",
                           host_reboot_command=("apiclient", "reboot"))
    spec = ProviderSpec(ProviderType.HOST_REBOOT, {"timeoutSeconds": 600})
    provider = build_provider(spec, context)
    assert isinstance(provider, HostRebootProvider) and provider.host_command == ("apiclient", "reboot")
    default = build_provider(spec, BuildContext(context.kube, clock, NAMES, namespace=NS, image="img:1"))
    assert isinstance(default, HostRebootProvider) and default.host_command == host_reboot_argv(api.HOST_REBOOT_COMMAND)


def _controller_args(config: dict[str, Any]) -> list[str]:
    deployment = next(o for o in stack_objects(stack_config_from_dict(config))
                      if o["kind"] == "Deployment" and o["metadata"]["name"] == "autoclusters-controller")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_stack_setting_reaches_the_controllers_flag_and_the_default_adds_nothing() -> None:
    assert "--host-reboot-command" not in _controller_args({})  # the rendered manifests stay as they were
    args = _controller_args({"hostRebootCommand": BOTTLEROCKET})
    assert args[args.index("--host-reboot-command") + 1] == BOTTLEROCKET
    with pytest.raises(PoolConfigError, match="hostRebootCommand: the host reboot command is empty"):
        stack_config_from_dict({"hostRebootCommand": ""})
    with pytest.raises(PoolConfigError, match=r"hostRebootCommand: .*not valid shell words"):
        stack_config_from_dict({"hostRebootCommand": "sh -c 'x"})


def test_the_controller_refuses_a_command_that_is_not_shell_words(capsys: pytest.CaptureFixture[str]) -> None:
    from autoclusters.cli.main import main

    code = main(["controller", "run", "--kubeconfig", "/nonexistent", "--host-reboot-command", "sh -c 'x"])
    assert code == 2 and "--host-reboot-command: the host reboot command" in capsys.readouterr().err


def _failed_job(api_: FakeApi, op: Operation, provider: HostRebootProvider, node: str,
                terminated: dict[str, Any] | None) -> None:
    """The Job controller's verdict on the Job, and the kubelet's record of its container."""
    name = job_name(op)
    api_.edit(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}", lambda j: j.update(status={"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"}]}))
    if terminated is not None:
        api_.put(f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-x7k2p", "namespace": NS, "labels": {"batch.kubernetes.io/job-name": name}},
            "spec": {"nodeName": node, "containers": [{"name": "reboot", "image": "img:1"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "reboot", "state": {
                "terminated": {"exitCode": terminated["exitCode"], "reason": "Error",
                               "message": terminated.get("message", "")}}}]}})


@pytest.fixture
def reboot() -> tuple[FakeApi, HostRebootProvider, Operation]:
    clock = FakeClock()
    api_ = FakeApi(clock=clock.now)
    api_.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "br-1"},
                               "status": {"nodeInfo": {"bootID": "boot-1"},
                                          "conditions": [{"type": "Ready", "status": "True"}]}})
    provider = HostRebootProvider(api_.kube(), clock, NAMES, namespace=NS, image="img:1", timeout=600)
    op = Operation("rec-1", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    provider.drive(op, "br-1", "p")
    return api_, provider, op


def _view(api_: FakeApi, provider: HostRebootProvider, op: Operation) -> Any:
    return provider.progress(op, "br-1", "p", lambda n: api_.read(f"/api/v1/nodes/{n}"))


def test_a_host_without_the_commands_program_says_which_setting_to_change(reboot: Any) -> None:
    api_, provider, op = reboot
    _failed_job(api_, op, provider, "br-1", {"exitCode": 127, "message": "nsenter: failed to execute sh: "
                                                                         "No such file or directory\n"})
    view = _view(api_, provider, op)
    assert view.state == ProviderState.FAILED
    said = "nsenter: failed to execute sh: No such file or directory"
    assert f"'sh' is not on the host (exit 127: {said})" in view.message
    assert "--host-reboot-command" in view.message and "hostRebootCommand" in view.message
    assert "apiclient reboot" in view.message and f"logs job/{job_name(op)}" in view.message


def test_another_exit_status_is_named_with_the_commands_last_words(reboot: Any) -> None:
    api_, provider, op = reboot
    _failed_job(api_, op, provider, "br-1", {"exitCode": 1, "message": "nsenter: reassociate to namespace "
                                                                       "'ns/mnt' failed: Operation not permitted"})
    view = _view(api_, provider, op)
    assert view.state == ProviderState.FAILED and "its command exited 1: nsenter: reassociate" in view.message
    assert "(BackoffLimitExceeded: Job has reached the specified backoff limit)" in view.message
    assert "--host-reboot-command" not in view.message


def test_the_commands_last_words_are_redacted_and_cut(reboot: Any) -> None:
    """The termination message is the end of the container's log: a host command that prints a
    URL with credentials (a BMC's) reaches the record and the events only redacted."""
    api_, provider, op = reboot
    _failed_job(api_, op, provider, "br-1", {"exitCode": 1, "message": "x" * 5000 + "\ncurl: (22) "
                                             "https://admin:hunter2@bmc.example/reboot?token=hunter2 returned 401"})
    view = _view(api_, provider, op)
    assert "its command exited 1: [cut to the last 300 characters] " in view.message
    assert "https://***@bmc.example/reboot?token=*** returned 401" in view.message and "hunter2" not in view.message


def test_a_failed_job_without_a_pod_keeps_the_job_controllers_words_and_says_where_to_look(reboot: Any) -> None:
    api_, provider, op = reboot
    _failed_job(api_, op, provider, "br-1", None)  # the pod never ran (or is gone)
    view = _view(api_, provider, op)
    assert view.state == ProviderState.FAILED and "BackoffLimitExceeded" in view.message
    assert f"{NS}/{job_name(op)}" in view.message and f"kubectl -n {NS} logs job/{job_name(op)}" in view.message
    assert "--host-reboot-command" not in view.message
    assert api_.read(f"/apis/batch/v1/namespaces/{NS}/jobs/{job_name(op)}") is not None  # kept for its log
