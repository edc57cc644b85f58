"""The redfish provider's own logic (issue 26 item 2): the node's system URL, the ResetType
chosen from what the BMC offers, the credentials Secret, the verdict from the node, a restarted
controller that never resets twice, and its RBAC (its one Secret, by name). Against a BMC it is
tested in tests/integration/test_redfish.py (sushy-tools' emulator)."""

from __future__ import annotations

import base64
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
from autoclusters.providers.redfish import REDFISH_SECRET, RedfishProvider, choose_reset, credentials, system_ref
from autoclusters.providers.registry import BuildContext, build_provider
from autoclusters.providers.types import Operation, ProviderState
from tests.unit import builders
from tests.unit.fakeapi import FakeApi
from tests.unit.providers.remote_reset_support import assert_only_its_secret, closed_port, reset_once, wait_verdict
from tests.unit.rbac_calls import calls

NAMES = Names()
NS = DEFAULT_NAMESPACE
SYSTEM = "https://10.0.0.5:8443/redfish/v1/Systems/1"


def test_the_system_url_names_the_bmc_and_the_system() -> None:
    ref = system_ref(SYSTEM + "/")
    assert (ref.bmc, ref.path, ref.url) == ("https://10.0.0.5:8443", "/redfish/v1/Systems/1", SYSTEM)
    for bad, why in (("ftp://bmc/redfish/v1/Systems/1", "not an http"), ("https://bmc/redfish/v1/Systems",
                                                                            "does not name a system"),
                     ("https://bmc/redfish/v1/Systems/1/Bios", "does not name a system"),
                     ("https://root:pw@bmc/redfish/v1/Systems/1", "must not carry credentials"), ("", "not an http")):
        with pytest.raises(ValueError, match=why) as err:
            system_ref(bad)
        assert "pw" not in str(err.value)


def test_the_reset_is_the_most_thorough_one_the_bmc_offers() -> None:
    assert choose_reset({"On", "ForceOff", "ForceRestart", "PowerCycle", "GracefulRestart"}, "On") == "PowerCycle"
    # sushy-tools' emulator offers no PowerCycle
    assert choose_reset({"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi"},
                        "On") == "ForceRestart"
    assert choose_reset({"On", "GracefulRestart"}, "On") == "GracefulRestart"
    assert choose_reset({"On", "ForceRestart"}, "Off") == "On"  # a system that is off is powered on
    with pytest.raises(ValueError, match=r"offers none of the resets PowerCycle, ForceRestart, GracefulRestart .*"
                                         r"\(it offers: ForceOff, On\)"):
        choose_reset({"On", "ForceOff"}, "On")
    with pytest.raises(ValueError, match="none of the resets On for a system that is Off"):
        choose_reset({"ForceRestart"}, "Off")


def _secret(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": REDFISH_SECRET, "namespace": NS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def test_the_credentials_come_from_the_secret() -> None:
    got = credentials(_secret(username="admin", password="pw", **{"ca.crt": "PEM"}), "Secret x")
    assert (got.username, got.password, got.ca_bundle) == ("admin", "pw", "PEM")
    assert credentials(_secret(username="admin", password="pw"), "Secret x").ca_bundle == ""
    with pytest.raises(ValueError, match="Secret x needs the keys username and password"):
        credentials(_secret(username="admin"), "Secret x")


def test_the_settings_are_checked_and_tls_is_verified_unless_the_pool_says_not_to() -> None:
    choice = parse_provider_choice({"type": "redfish"})
    assert choice.for_action("reset") == ProviderSpec(ProviderType.REDFISH, {
        "timeoutSeconds": 600, "requestTimeoutSeconds": 30, "powerOnAfterSeconds": 60,
        "insecureSkipTLSVerify": False})
    assert choice.for_action("replace") is None
    with pytest.raises(ProviderSettingsError, match="insecureSkipTLSVerify must be true or false, got 'yes'"):
        parse_provider_choice({"type": "redfish", "redfish": {"insecureSkipTLSVerify": "yes"}})
    provider = build_provider(parse_provider_choice({"type": "redfish", "redfish": {
        "insecureSkipTLSVerify": True, "timeoutSeconds": 90}}).for_action("reset") or ProviderSpec(
        ProviderType.REDFISH), BuildContext(FakeApi().kube(), FakeClock(), NAMES, namespace="ns-1"))
    assert isinstance(provider, RedfishProvider)
    assert (provider.insecure, provider.timeout, provider.namespace) == (True, 90, "ns-1")


def _node(name: str, url: str | None = SYSTEM, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {**({NAMES.redfish_system_annotation: url} if url is not None else {}), **(annotations or {})}
    return builders.node(name, pool="", detected=False, boot_id="boot-1", annotations=ann)


def test_a_node_without_a_usable_system_url_is_refused() -> None:
    provider = RedfishProvider(FakeApi().kube(), FakeClock(), NAMES, namespace=NS)
    assert provider.refusal(_node("a")) == ""
    assert NAMES.redfish_system_annotation in provider.refusal(_node("a", url=None))
    assert "does not name a system" in provider.refusal(_node("a", url="https://bmc/redfish/v1"))


def test_an_unreachable_bmc_fails_the_reset_naming_it_and_the_rbac_is_the_one_secret() -> None:
    clock = FakeClock()
    fake = FakeApi(clock=clock.now)
    url = f"http://127.0.0.1:{closed_port()}/redfish/v1/Systems/1"
    fake.put("/api/v1/nodes", _node("a", url))
    fake.put(f"/api/v1/namespaces/{NS}/secrets", _secret(username="admin", password="pw"))
    provider = RedfishProvider(fake.kube(), clock, NAMES, namespace=NS, request_timeout=2)
    op = Operation("rec-a", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    lookup = lambda name: fake.read(f"/api/v1/nodes/{name}")  # noqa: E731
    assert provider.progress(op, "a", "p", lookup).state == ProviderState.NOT_STARTED
    provider.drive(op, "a", "p")
    view = wait_verdict(provider, op, "a", lookup)
    assert view.state == ProviderState.FAILED
    bmc = url.rsplit("/redfish", 1)[0]
    assert f"the BMC {bmc} (system /redfish/v1/Systems/1) failed while connecting" in view.message
    assert "admin" not in view.message  # the credentials never reach the record
    # the node was not marked: nothing was asked of the BMC
    assert NAMES.redfish_reset_annotation not in (fake.read("/api/v1/nodes/a") or {})["metadata"]["annotations"]
    assert_only_its_secret(fake, NAMES, NS, ProviderType.REDFISH, REDFISH_SECRET)


def test_a_missing_secret_fails_the_reset_saying_what_it_holds() -> None:
    fake = FakeApi()
    fake.put("/api/v1/nodes", _node("a"))
    provider = RedfishProvider(fake.kube(), FakeClock(), NAMES, namespace=NS)
    view = reset_once(provider, fake)
    assert view.state == ProviderState.FAILED
    assert f"Secret {NS}/{REDFISH_SECRET} does not exist" in view.message and "username, password" in view.message


def test_a_restarted_controller_never_resets_twice_and_the_node_decides() -> None:
    """The node carries the operation id (written before the reset was asked for): a new
    provider (a restarted controller) does not ask the BMC again, it waits for the node; a new
    boot id and Ready is success; no new boot id by the timeout is a failure naming the BMC."""
    clock = FakeClock()
    fake = FakeApi(clock=clock.now)
    # the BMC's URL leads nowhere: asking it would fail the operation
    url = f"http://127.0.0.1:{closed_port()}/redfish/v1/Systems/7"
    fake.put("/api/v1/nodes", _node("a", url, {NAMES.redfish_reset_annotation: "rec-a"}))
    lookup = lambda name: fake.read(f"/api/v1/nodes/{name}")  # noqa: E731
    provider = RedfishProvider(fake.kube(), clock, NAMES, namespace=NS, timeout=60)
    op = Operation("rec-a", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    provider.drive(op, "a", "p")
    assert wait_verdict(provider, op, "a", lookup).state == ProviderState.RUNNING
    assert all("secrets" not in c.resource for c in calls(fake))  # not even the credentials were read
    fake.edit("/api/v1/nodes/a", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    fake.edit("/api/v1/nodes/a", lambda n: n["status"]["conditions"][0].update(status="False"))
    assert provider.progress(op, "a", "p", lookup).state == ProviderState.RUNNING  # not Ready yet
    fake.edit("/api/v1/nodes/a", lambda n: n["status"]["conditions"][0].update(status="True"))
    assert provider.progress(op, "a", "p", lookup).state == ProviderState.SUCCEEDED
    assert NAMES.redfish_reset_annotation not in (lookup("a") or {})["metadata"]["annotations"]  # ended: removed
    # a controller restarted after the success, before it was recorded, drives the operation
    # again: the node's new boot id says the reset is over (its mark is gone), nothing is asked
    again = RedfishProvider(fake.kube(), clock, NAMES, namespace=NS, timeout=60)
    again.drive(op, "a", "p")
    assert wait_verdict(again, op, "a", lookup).state == ProviderState.SUCCEEDED
    assert all("secrets" not in c.resource for c in calls(fake))
    # another operation that the node never comes back from
    late = Operation("rec-b", RepairAction.RESET, clock.now(), boot_id_before="boot-2")
    fake.edit("/api/v1/nodes/a", lambda n: n["metadata"]["annotations"].update(
        {NAMES.redfish_reset_annotation: "rec-b"}))
    provider.drive(late, "a", "p")
    assert wait_verdict(provider, late, "a", lookup).state == ProviderState.RUNNING
    clock.advance(61)
    view = provider.progress(late, "a", "p", lookup)
    assert view.state == ProviderState.FAILED
    assert NAMES.redfish_reset_annotation not in (lookup("a") or {})["metadata"]["annotations"]
    assert "was not Ready with a new boot id 60s after the reset started" in view.message
    assert f"on its BMC ({url})" in view.message


def test_a_replacement_is_not_its_job() -> None:
    provider = RedfishProvider(FakeApi().kube(), FakeClock(), NAMES, namespace=NS)
    op = Operation("rec-a", RepairAction.REPLACE, FakeClock().now())
    provider.drive(op, "a", "p")
    view = provider.progress(op, "a", "p", lambda name: _node(name))
    assert view.state == ProviderState.FAILED and "resets nodes only" in view.message
