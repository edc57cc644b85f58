"""The ec2 provider on the local cluster, against moto's EC2 emulator on 127.0.0.1.

moto's server mode (an emulator, not EC2: see ec2_support.py) holds the instances; each kwok
node's ``spec.providerID`` names one (``aws:///us-east-1a/i-...``). The controller reaches it
through ``ec2_support.Ec2Proxy`` (boto3's ``AWS_ENDPOINT_URL_EC2`` in the controller's
environment, the operator's endpoint setting), which counts the calls, throttles when told to,
and turns each RebootInstances / StartInstances moto carried out into the kwok node's boot (the
annotations of ``autoclusters.sim.hosts.reboot_request``: NotReady, then Ready with a new boot
id). The controller, its RBAC (the one Secret it may read), boto3, its credential chain and
EC2's wire protocol are real.
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from autoclusters import names as n
from autoclusters.kube import Conflict
from autoclusters.providers.ec2 import EC2_SECRET
from autoclusters.sim.hosts import boot_id_after
from tests.integration.controller_support import Env
from tests.integration.ec2_support import Ec2Proxy, moto_server
from tests.integration.helpers import wait_for
from tests.integration.remote_boot import play_boot

pytestmark = pytest.mark.integration

ZONE, REGION = "us-east-1a", "us-east-1"
# moto accepts any keys; these reach it from the Secret (credentials: secret) or from the
# controller's environment (podIdentity: boto3's default chain, its first link)
KEY_ID, SECRET_KEY = "AKIAEXAMPLEEXAMPLE01", "moto-accepts-any-secret"


class Aws:
    """moto, the proxy, an EC2 client of the test's own (straight to moto), and which node each
    instance is. ``hold`` keeps the next boots from being played until ``release``."""

    def __init__(self, ctl: Env, moto: str) -> None:
        self.ctl = ctl
        self.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto, aws_access_key_id=KEY_ID,
                                aws_secret_access_key=SECRET_KEY)
        self.proxy = Ec2Proxy(moto, self.booted)
        self.node_of: dict[str, str] = {}
        self.boots: dict[str, str] = {}  # node -> the "by" of its last played boot
        self.held: list[str] = []
        self.holding = threading.Event()
        self._lock = threading.Lock()

    def instance(self) -> str:
        image = self.ec2.describe_images()["Images"][0]["ImageId"]
        run = self.ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="p5.48xlarge",
                                     Placement={"AvailabilityZone": ZONE})
        return str(run["Instances"][0]["InstanceId"])

    def state(self, instance: str) -> str:
        got = self.ec2.describe_instances(InstanceIds=[instance])
        return str(got["Reservations"][0]["Instances"][0]["State"]["Name"])

    def put(self, instance: str, call: str, state: str) -> None:
        """The test's own ``call`` (stop_instances, terminate_instances) on ``instance``, until it is ``state``."""
        getattr(self.ec2, call)(InstanceIds=[instance])
        wait_for(f"instance {instance} {state}", lambda: self.state(instance) == state)

    def take(self, node: str) -> str:
        """A new moto instance, named by ``node``'s providerID."""
        instance = self.instance()
        self.node_of[instance] = node
        self.ctl.kube.patch_node(node, {"spec": {"providerID": f"aws:///{ZONE}/{instance}"}})
        return instance

    def booted(self, instance: str, action: str) -> None:
        with self._lock:
            if self.holding.is_set():
                self.held.append(instance)
                return
        self.play(instance, action)

    def play(self, instance: str, action: str) -> None:
        node = self.node_of.get(instance)
        if not node:
            return
        by = f"ec2-{instance}-{action}-{self.proxy.done[action]}"
        self.boots[node] = by
        play_boot(self.ctl.kube, node, by)

    def release(self) -> None:
        with self._lock:
            self.holding.clear()
            held, self.held = self.held, []
        for instance in held:
            self.play(instance, "RebootInstances")


@pytest.fixture(scope="module")
def aws(ctl: Env) -> Iterator[Aws]:
    if not ctl.cluster.local:
        pytest.skip("the host's boot is played by the local cluster's simulator (autoclusters.sim.hosts)")
    with moto_server() as moto, pytest.MonkeyPatch.context() as env:
        aws = Aws(ctl, moto)
        # the controllers started from here on reach EC2 through the proxy; never the instance
        # metadata service (169.254.169.254): the region comes from the providerID
        env.setenv("AWS_ENDPOINT_URL_EC2", aws.proxy.url)
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        env.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
        env.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        restart(ctl)
        try:
            yield aws
        finally:
            aws.proxy.close()
    restart(ctl)  # the next tests' controller without them


def restart(ctl: Env) -> None:
    for c in ctl.running():
        c.kill()
    ctl.ensure_one_controller()


def write_secret(ctl: Env) -> None:
    data = {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET_KEY}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": EC2_SECRET, "namespace": ctl.namespace},
            "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    with contextlib.suppress(Conflict):
        ctl.kube.create(f"/api/v1/namespaces/{ctl.namespace}/secrets", body)


def ec2_pool(ctl: Env, **settings: Any) -> tuple[str, str]:
    """A pool resetting through EC2 and replacing by simulation: (pool, node)."""
    pool, (node,) = ctl.pool("auto", provider={
        "reset": {"type": "ec2", "ec2": {"timeoutSeconds": 60, "requestTimeoutSeconds": 5, **settings}},
        "replace": {"type": "simulated"}})
    return pool, node


def boot_id(ctl: Env, node: str) -> str:
    return str(((ctl.find_node(node) or {}).get("status") or {}).get("nodeInfo", {}).get("bootID", ""))


def succeeded_as_reset(ctl: Env, node: str) -> dict[str, Any]:
    done = ctl.record_in(node, "Succeeded", timeout=90)
    assert done["status"]["action"] == "reset" and not done["status"].get("escalated")
    assert ctl.names.ec2_reset_annotation not in ctl.node(node)["metadata"]["annotations"]
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)
    assert n.EVENT_FAILED not in ctl.reasons(node)
    return done


def calls_for(aws: Aws, before: dict[str, int]) -> dict[str, int]:
    now = aws.proxy.counts()
    return {a: now[a] - before.get(a, 0) for a in now if now[a] - before.get(a, 0)}


@pytest.mark.parametrize("credentials", ["secret", "podIdentity"])
def test_a_reset_reboots_the_nodes_instance(ctl: Env, aws: Aws, credentials: str) -> None:
    """The keys from the Secret, or the pod's own chain (here its environment): one
    RebootInstances for the node's instance, the host boots, the repair succeeds as a reset."""
    if credentials == "secret":
        write_secret(ctl)
    _, node = ec2_pool(ctl, credentials=credentials)
    instance = aws.take(node)
    before_calls, before = aws.proxy.counts(), boot_id(ctl, node)
    ctl.raise_fault(node)
    succeeded_as_reset(ctl, node)
    assert calls_for(aws, before_calls) == {"RebootInstances": 1}
    assert boot_id(ctl, node) == boot_id_after(aws.boots[node]) != before
    assert aws.state(instance) == "running"


def test_stop_start_power_cycles_the_instance(ctl: Env, aws: Aws) -> None:
    write_secret(ctl)
    _, node = ec2_pool(ctl, mode="stopStart", credentials="secret")
    instance = aws.take(node)
    before_calls = aws.proxy.counts()
    ctl.raise_fault(node)
    succeeded_as_reset(ctl, node)
    assert calls_for(aws, before_calls) == {"StopInstances": 1, "StartInstances": 1}
    assert aws.state(instance) == "running"


def test_a_stopped_instance_is_started_not_rebooted(ctl: Env, aws: Aws) -> None:
    """mode reboot, but the instance is stopped (EC2 answers IncorrectInstanceState to a reboot
    of a stopped instance): the reset starts it."""
    _, node = ec2_pool(ctl)
    instance = aws.take(node)
    aws.put(instance, "stop_instances", "stopped")
    before_calls = aws.proxy.counts()
    ctl.raise_fault(node)
    succeeded_as_reset(ctl, node)
    assert calls_for(aws, before_calls) == {"StartInstances": 1}
    assert aws.state(instance) == "running"


def test_a_throttled_reboot_is_asked_again_and_done_once(ctl: Env, aws: Aws) -> None:
    """The proxy answers the first two RebootInstances with RequestLimitExceeded (EC2's answer to
    a call it did not carry out); the provider backs off and asks again: three asked, one done."""
    _, node = ec2_pool(ctl)
    aws.take(node)
    before_calls, asked = aws.proxy.counts(), aws.proxy.asked["RebootInstances"]
    aws.proxy.throttle["RebootInstances"] = 2
    ctl.raise_fault(node)
    succeeded_as_reset(ctl, node)
    assert aws.proxy.asked["RebootInstances"] - asked == 3
    assert calls_for(aws, before_calls) == {"RebootInstances": 1}


def test_a_controller_killed_mid_reset_never_reboots_twice(ctl: Env, aws: Aws) -> None:
    """EC2 has carried out the reboot (the boot is held back) when the controller is killed; the
    next one finds OPERATION/reboot on the node, asks EC2 nothing, and sees the node come back."""
    _, node = ec2_pool(ctl)
    aws.take(node)
    before_calls = aws.proxy.counts()
    aws.holding.set()
    try:
        ctl.raise_fault(node)
        wait_for("EC2 took the reboot", lambda: calls_for(aws, before_calls) == {"RebootInstances": 1}, timeout=60)
        marked = ctl.node(node)["metadata"]["annotations"].get(ctl.names.ec2_reset_annotation)
        restart(ctl)
        (after,) = ctl.running()
        wait_for("the next controller found the mark", lambda: f"ec2 reset {node}: ok" in after.log(), timeout=60)
    finally:
        aws.release()
    done = succeeded_as_reset(ctl, node)
    assert marked == f"{done['status']['operation']['id']}/reboot"  # what the next controller found
    assert calls_for(aws, before_calls) == {"RebootInstances": 1}  # one reboot, never a second


def test_a_controller_killed_between_stop_and_start_starts_without_stopping_again(ctl: Env, aws: Aws) -> None:
    """stopStart: EC2 has stopped the instance, the controller waits for the stop to show
    (the proxy says stopping) when it is killed; the next one finds OPERATION/stop, does not
    stop again, waits, and starts the instance: one stop, one start."""
    _, node = ec2_pool(ctl, mode="stopStart")
    instance = aws.take(node)
    before_calls = aws.proxy.counts()
    aws.proxy.stopping.set()
    try:
        ctl.raise_fault(node)
        wait_for("the controller waits for the stop", lambda: aws.proxy.said_stopping >= 1, timeout=60)
        assert calls_for(aws, before_calls) == {"StopInstances": 1}
        marked = ctl.node(node)["metadata"]["annotations"].get(ctl.names.ec2_reset_annotation)
        restart(ctl)
        seen = aws.proxy.said_stopping
        wait_for("the next controller waits for the stop", lambda: aws.proxy.said_stopping > seen, timeout=60)
    finally:
        aws.proxy.stopping.clear()
    done = succeeded_as_reset(ctl, node)
    assert marked == f"{done['status']['operation']['id']}/stop"
    assert calls_for(aws, before_calls) == {"StopInstances": 1, "StartInstances": 1}
    assert aws.state(instance) == "running"


def test_a_terminated_instance_fails_the_reset_naming_it(ctl: Env, aws: Aws) -> None:
    _, node = ec2_pool(ctl)
    instance = aws.take(node)
    aws.put(instance, "terminate_instances", "terminated")
    before_calls = aws.proxy.counts()
    ctl.raise_fault(node)
    done = ctl.record_in(node, "Succeeded", timeout=90)
    assert done["status"]["action"] == "replace" and done["status"]["escalated"] is True
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)
    failed = next(e for e in ctl.events(node) if e["reason"] == n.EVENT_FAILED)
    assert f"EC2 instance {instance} (region {REGION}) is terminated: there is nothing to reset" in failed["message"]
    assert calls_for(aws, before_calls) == {}


def test_a_node_that_is_no_ec2_instance_is_refused_before_anything_is_drained(ctl: Env, aws: Aws) -> None:
    _, node = ec2_pool(ctl)
    ctl.raise_fault(node)
    record = wait_for("the repair held", lambda: next(
        (r for r in ctl.records(node) if (r.get("status") or {}).get("hold") == "ProviderRefusedNode"), None))
    assert "has no spec.providerID" in record["status"]["message"]
    assert not ctl.node(node).get("spec", {}).get("unschedulable")  # never cordoned nor drained
    assert os.environ.get("AWS_ENDPOINT_URL_EC2") == aws.proxy.url
