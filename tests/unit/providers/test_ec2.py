"""The ec2 provider's own logic (issue 26 item 3): the node's providerID and its region, the
settings, the keys Secret, a restarted controller that never asks twice, an endpoint that does
not answer, and its RBAC (its one Secret, by name). Against EC2's wire protocol it is tested in
tests/integration/test_ec2.py (moto's server)."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.providers import (
    ProviderSettingsError,
    ProviderSpec,
    ProviderType,
    parse_provider_choice,
)
from autoclusters.names import Names
from autoclusters.providers.ec2 import EC2_SECRET, Ec2Provider, instance_ref, keys
from autoclusters.providers.registry import BuildContext, build_provider
from autoclusters.providers.types import Operation, ProviderState
from tests.unit import builders
from tests.unit.fakeapi import FakeApi
from tests.unit.providers.remote_reset_support import assert_only_its_secret, closed_port, reset_once, wait_verdict
from tests.unit.rbac_calls import calls

NAMES = Names()
NS = DEFAULT_NAMESPACE
INSTANCE = "i-0123456789abcdef0"


def test_the_provider_id_names_the_instance_and_its_zone_the_region() -> None:
    for zone, region in (("us-east-1a", "us-east-1"), ("us-west-2-lax-1a", "us-west-2"),
                         ("us-gov-west-1a", "us-gov-west-1"), ("us-east-1-wl1-bos-wlz-1", "us-east-1"),
                         ("eu-central-1c", "eu-central-1")):
        ref = instance_ref(f"aws:///{zone}/{INSTANCE}")
        assert (ref.zone, ref.instance, ref.region) == (zone, INSTANCE, region)
    for bad, why in (("", "has no spec.providerID"), ("gce://p/z/n", "does not name an EC2 instance"),
                     (f"aws:///us-east-1a/{INSTANCE}/x", "does not name"),
                     ("aws:///us-east-1a/vol-1", "does not name")):
        with pytest.raises(ValueError, match=why):
            instance_ref(bad)


def _secret(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": EC2_SECRET, "namespace": NS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def test_the_keys_come_from_the_secret() -> None:
    got = keys(_secret(aws_access_key_id="AKIA1", aws_secret_access_key="s", aws_session_token="t"), "Secret x")
    assert (got.access_key_id, got.secret_access_key, got.session_token) == ("AKIA1", "s", "t")
    assert keys(_secret(aws_access_key_id="AKIA1", aws_secret_access_key="s"), "Secret x").session_token == ""
    with pytest.raises(ValueError, match="Secret x needs the keys aws_access_key_id and aws_secret_access_key"):
        keys(_secret(aws_access_key_id="AKIA1"), "Secret x")


def test_the_settings_are_checked_and_reach_the_provider() -> None:
    assert parse_provider_choice({"type": "ec2"}).for_action("reset") == ProviderSpec(ProviderType.EC2, {
        "mode": "reboot", "credentials": "podIdentity", "timeoutSeconds": 900, "requestTimeoutSeconds": 30})
    assert parse_provider_choice({"type": "ec2"}).for_action("replace") is None
    with pytest.raises(ProviderSettingsError,
                       match=re.escape("mode must be one of reboot|stopStart, got 'powerCycle'")):
        parse_provider_choice({"type": "ec2", "ec2": {"mode": "powerCycle"}})
    with pytest.raises(ProviderSettingsError, match=r"unknown key\(s\) endpointUrl"):  # never a pool author's URL
        parse_provider_choice({"type": "ec2", "ec2": {"endpointUrl": "http://169.254.169.254"}})
    spec = parse_provider_choice({"type": "ec2", "ec2": {"mode": "stopStart", "region": "eu-west-1",
                                                         "credentials": "secret"}}).for_action("reset")
    provider = build_provider(spec or ProviderSpec(ProviderType.EC2),
                              BuildContext(FakeApi().kube(), FakeClock(), NAMES, namespace="ns-1"))
    assert isinstance(provider, Ec2Provider)
    assert (provider.mode, provider.region, provider.credentials, provider.namespace) == (
        "stopStart", "eu-west-1", "secret", "ns-1")


def _node(name: str, provider_id: str | None = f"aws:///us-east-1a/{INSTANCE}",
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return builders.node(name, pool="", detected=False, boot_id="boot-1", provider_id=provider_id or "",
                         annotations=annotations)


def test_a_node_that_is_no_ec2_instance_is_refused() -> None:
    provider = Ec2Provider(FakeApi().kube(), FakeClock(), NAMES, namespace=NS)
    assert provider.refusal(_node("a")) == ""
    assert "has no spec.providerID" in provider.refusal(_node("a", provider_id=None))
    assert "does not name an EC2 instance" in provider.refusal(_node("a", provider_id="kwok://a"))
    assert "names no region; set the pool's ec2.region" in provider.refusal(_node("a", "aws:///local/" + INSTANCE))
    assert Ec2Provider(FakeApi().kube(), FakeClock(), NAMES, namespace=NS, region="eu-west-1").refusal(
        _node("a", "aws:///local/" + INSTANCE)) == ""


def test_an_endpoint_that_refuses_fails_the_reset_naming_the_instance_and_the_rbac_is_the_one_secret(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's endpoint setting (boto3's AWS_ENDPOINT_URL_EC2) leads to a closed port."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", f"http://127.0.0.1:{closed_port()}")
    clock = FakeClock()
    fake = FakeApi(clock=clock.now)
    fake.put("/api/v1/nodes", _node("a"))
    fake.put(f"/api/v1/namespaces/{NS}/secrets", _secret(aws_access_key_id="AKIAEXAMPLE",
                                                         aws_secret_access_key="hush"))
    provider = Ec2Provider(fake.kube(), clock, NAMES, namespace=NS, credentials="secret", request_timeout=2)
    op = Operation("rec-a", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    lookup = lambda name: fake.read(f"/api/v1/nodes/{name}")  # noqa: E731
    assert provider.progress(op, "a", "p", lookup).state == ProviderState.NOT_STARTED
    provider.drive(op, "a", "p")
    view = wait_verdict(provider, op, "a", lookup)
    assert view.state == ProviderState.FAILED
    assert f"EC2 instance {INSTANCE} (region us-east-1): DescribeInstances failed: Could not connect" in view.message
    assert "hush" not in view.message
    # the node was not marked: nothing that resets was asked for
    assert NAMES.ec2_reset_annotation not in (fake.read("/api/v1/nodes/a") or {})["metadata"]["annotations"]
    assert_only_its_secret(fake, NAMES, NS, ProviderType.EC2, EC2_SECRET)


def test_a_missing_secret_fails_the_reset_saying_what_it_holds() -> None:
    fake = FakeApi()
    fake.put("/api/v1/nodes", _node("a"))
    provider = Ec2Provider(fake.kube(), FakeClock(), NAMES, namespace=NS, credentials="secret")
    view = reset_once(provider, fake)
    assert view.state == ProviderState.FAILED
    assert f"Secret {NS}/{EC2_SECRET} does not exist" in view.message and "aws_access_key_id" in view.message


@pytest.mark.parametrize("step", ["reboot", "start"])
def test_a_restarted_controller_never_asks_twice_and_the_node_decides(monkeypatch: pytest.MonkeyPatch,
                                                                     step: str) -> None:
    """The node carries OPERATION/STEP (written before the call): a new provider (a restarted
    controller) asks EC2 nothing, it waits for the node; a new boot id and Ready is success, and
    the mark goes; no new boot id by the timeout is a failure naming the instance."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", f"http://127.0.0.1:{closed_port()}")  # asking would fail
    clock = FakeClock()
    fake = FakeApi(clock=clock.now)
    fake.put("/api/v1/nodes", _node("a", annotations={NAMES.ec2_reset_annotation: f"rec-a/{step}"}))
    lookup = lambda name: fake.read(f"/api/v1/nodes/{name}")  # noqa: E731
    provider = Ec2Provider(fake.kube(), clock, NAMES, namespace=NS, timeout=60, credentials="secret")
    op = Operation("rec-a", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    provider.drive(op, "a", "p")
    assert wait_verdict(provider, op, "a", lookup).state == ProviderState.RUNNING
    assert all("secrets" not in c.resource for c in calls(fake))  # not even the keys were read
    fake.edit("/api/v1/nodes/a", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    assert provider.progress(op, "a", "p", lookup).state == ProviderState.SUCCEEDED
    assert NAMES.ec2_reset_annotation not in (lookup("a") or {})["metadata"]["annotations"]
    # another operation's mark is not this one's: a stale mark of rec-a never guards rec-b
    late = Operation("rec-b", RepairAction.RESET, clock.now(), boot_id_before="boot-2")
    fake.edit("/api/v1/nodes/a", lambda n: n["metadata"]["annotations"].update(
        {NAMES.ec2_reset_annotation: f"rec-b/{step}"}))
    provider.drive(late, "a", "p")
    assert wait_verdict(provider, late, "a", lookup).state == ProviderState.RUNNING
    clock.advance(61)
    view = provider.progress(late, "a", "p", lookup)
    assert view.state == ProviderState.FAILED
    assert "was not Ready with a new boot id 60s after the reset started" in view.message
    assert f"aws:///us-east-1a/{INSTANCE}" in view.message
    assert NAMES.ec2_reset_annotation not in (lookup("a") or {})["metadata"]["annotations"]
