"""The redfish provider on the local cluster, against real BMC software on 127.0.0.1.

sushy-tools' emulator (fake driver, TLS, basic auth) stands for the BMCs: a reset through it
powers the emulated system off and on, and its Off -> On notice (``redfish_support.PowerNotices``)
reboots the kwok node's simulated host the way every local-cluster reboot is played (the
annotations of ``autoclusters.sim.hosts.reboot_request``: kwok's stages take the node NotReady,
then Ready with a new boot id). The controller, its RBAC (the one Secret it may read), the
provider's requests, TLS and the BMC's answers are real. A BMC that refuses (wrong credentials:
the emulator's 401), one whose certificate is not trusted, one that does not answer and one
whose system stays off each fail the reset with MaintenanceActionFailed naming the BMC and its
answer, and the repair escalates to the pool's replacement.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from autoclusters import certificates
from autoclusters import names as n
from autoclusters.kube import Conflict, NotFound
from autoclusters.providers.redfish import REDFISH_SECRET
from autoclusters.sim.hosts import boot_id_after
from tests.integration.controller_support import Env
from tests.integration.helpers import wait_for
from tests.integration.redfish_support import OffBmc, PowerNotices, SilentBmc, emulator
from tests.integration.remote_boot import play_boot

pytestmark = pytest.mark.integration

USER, PASSWORD = "admin", "s3cret-pw"
SYSTEMS = [str(uuid.uuid4()) for _ in range(4)]  # one emulated system per test that resets through it


class Bmcs:
    """The emulator, its CA, and which node each emulated system is. The fake driver applies a
    queued power change only when the system is next read; a real BMC changes it on its own,
    so a thread here reads every system in use twice a second (``watch``)."""

    def __init__(self, ctl: Env, url: str, ca: certificates.KeyPair, ca_file: Path, notices: PowerNotices) -> None:
        self.ctl, self.url, self.ca, self.ca_file, self.notices = ctl, url, ca, ca_file, notices
        self.node_of: dict[str, str] = {}
        self.boots: dict[str, str] = {}  # node -> the "by" of its last played boot
        self.free = list(SYSTEMS)
        self.stop = threading.Event()

    def watch(self) -> None:
        while not self.stop.wait(0.5):
            for system in list(self.node_of):
                with contextlib.suppress(requests.RequestException):
                    requests.get(self.system_url(system), auth=(USER, PASSWORD), verify=str(self.ca_file), timeout=5)

    def system_url(self, system: str) -> str:
        return f"{self.url}/redfish/v1/Systems/{system}"

    def take(self, node: str) -> str:
        system = self.free.pop()
        self.node_of[system] = node
        return system

    def booted(self, system: str) -> None:
        """The emulated system is on again after being off: its host boots."""
        node = self.node_of.get(system)
        if not node:
            return
        by = f"redfish-{system}-{len(self.notices.states.get(system, []))}"
        self.boots[node] = by
        play_boot(self.ctl.kube, node, by)


@pytest.fixture(scope="module")
def bmcs(ctl: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmcs]:
    if not ctl.cluster.local:
        pytest.skip("the host's reboot is played by the local cluster's simulator (autoclusters.sim.hosts)")
    now = dt.datetime.now(dt.UTC)
    ca = certificates.make_ca("test BMC CA", now, dt.timedelta(days=1))
    serving = certificates.make_serving(ca, ["127.0.0.1"], now, dt.timedelta(days=1))
    holder: list[Bmcs] = []
    notices = PowerNotices(lambda system: holder[0].booted(system))
    work = tmp_path_factory.mktemp("sushy")
    (work / "ca.pem").write_bytes(ca.cert_pem)
    try:
        with emulator(work, SYSTEMS, tls=serving, user=USER, password=PASSWORD, notify_url=notices.url) as url:
            holder.append(Bmcs(ctl, url, ca, work / "ca.pem", notices))
            watcher = threading.Thread(target=holder[0].watch, daemon=True)
            watcher.start()
            yield holder[0]
            holder[0].stop.set()
            watcher.join(10)
    finally:
        notices.close()


def write_secret(ctl: Env, password: str = PASSWORD, ca: bytes | None = None) -> None:
    data = {"username": USER, "password": password, **({"ca.crt": ca.decode()} if ca else {})}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": REDFISH_SECRET, "namespace": ctl.namespace},
            "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    path = f"/api/v1/namespaces/{ctl.namespace}/secrets"
    with contextlib.suppress(NotFound):
        ctl.kube.delete(f"{path}/{REDFISH_SECRET}")
    wait_for("the old Secret gone", lambda: _gone(ctl, f"{path}/{REDFISH_SECRET}"))
    with contextlib.suppress(Conflict):
        ctl.kube.create(path, body)


def _gone(ctl: Env, path: str) -> bool:
    try:
        ctl.kube.get(path)
    except NotFound:
        return True
    return False


def redfish_pool(ctl: Env, url: str | None, **settings: Any) -> tuple[str, str]:
    """A pool resetting through a BMC and replacing by simulation, its node annotated with its
    system's ``url`` (None: ``annotate`` later): (pool, node)."""
    pool, (node,) = ctl.pool("auto", provider={
        "reset": {"type": "redfish", "redfish": {"timeoutSeconds": 60, "requestTimeoutSeconds": 3, **settings}},
        "replace": {"type": "simulated"}})
    if url:
        annotate(ctl, node, url)
    return pool, node


def annotate(ctl: Env, node: str, url: str) -> None:
    ctl.kube.patch_node(node, {"metadata": {"annotations": {ctl.names.redfish_system_annotation: url}}})


def escalated_failure(ctl: Env, node: str) -> dict[str, Any]:
    """The reset failed, then the repair escalated to the replacement and succeeded: the failure's event."""
    done = ctl.record_in(node, "Succeeded", timeout=90)
    assert done["status"]["action"] == "replace" and done["status"]["escalated"] is True
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)  # events trail the record
    events = sorted(ctl.events(node), key=lambda e: e.get("eventTime") or e.get("firstTimestamp") or "")
    reasons = [e["reason"] for e in events]
    assert reasons.index(n.EVENT_FAILED) < reasons.index(n.EVENT_ESCALATED)
    failed = next(e for e in events if e["reason"] == n.EVENT_FAILED)
    assert failed["type"] == "Warning"
    return failed


def boot_id(ctl: Env, node: str) -> str:
    return str(((ctl.find_node(node) or {}).get("status") or {}).get("nodeInfo", {}).get("bootID", ""))


@pytest.mark.parametrize("trust", ["ca-bundle", "insecure-skip-verify"])
def test_a_reset_power_cycles_the_nodes_system_through_its_bmc(ctl: Env, bmcs: Bmcs, trust: str) -> None:
    """The BMC's certificate verified against the Secret's ca.crt, or (explicitly) not verified:
    the emulated system goes Off and On (ForceRestart: the emulator offers no PowerCycle), the
    host boots, and the repair succeeds as a reset, never escalated."""
    skip = trust == "insecure-skip-verify"
    write_secret(ctl, ca=None if skip else bmcs.ca.cert_pem)
    pool, node = redfish_pool(ctl, None, **({"insecureSkipTLSVerify": True} if skip else {}))
    system = bmcs.take(node)
    annotate(ctl, node, bmcs.system_url(system))
    before = boot_id(ctl, node)
    ctl.raise_fault(node)
    done = ctl.record_in(node, "Succeeded", timeout=90)
    assert done["status"]["action"] == "reset" and not done["status"].get("escalated")
    assert bmcs.notices.states[system][-2:] == ["Off", "On"]  # what the emulator's fake driver did
    assert boot_id(ctl, node) == boot_id_after(bmcs.boots[node]) != before
    # the operation id guarded the reset while it ran, and is gone with the operation
    assert ctl.names.redfish_reset_annotation not in ctl.node(node)["metadata"]["annotations"]
    assert n.EVENT_FAILED not in ctl.reasons(node)
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)
    assert ctl.pool_nodes(pool) == [node]


def test_a_controller_killed_mid_reset_never_resets_the_system_twice(ctl: Env, bmcs: Bmcs) -> None:
    """The BMC has taken the reset (the emulated system is off) when the controller is killed;
    the next one finds the operation id on the node, does not ask the BMC again, and sees the
    node come back: one power cycle, one reset, not escalated."""
    write_secret(ctl, ca=bmcs.ca.cert_pem)
    _, node = redfish_pool(ctl, None)
    system = bmcs.take(node)
    annotate(ctl, node, bmcs.system_url(system))
    ctl.raise_fault(node)
    wait_for("the BMC took the reset", lambda: bmcs.notices.states.get(system, [])[-1:] == ["Off"], timeout=60)
    marked = ctl.node(node)["metadata"]["annotations"].get(ctl.names.redfish_reset_annotation)
    for c in ctl.running():
        c.kill()
    ctl.ensure_one_controller()
    done = ctl.record_in(node, "Succeeded", timeout=90)
    assert done["status"]["action"] == "reset" and not done["status"].get("escalated")
    assert marked == done["status"]["operation"]["id"]  # what the next controller found
    assert bmcs.notices.states[system] == ["Off", "On"]  # one reset, never a second
    assert ctl.names.redfish_reset_annotation not in ctl.node(node)["metadata"]["annotations"]


def test_an_untrusted_bmc_certificate_fails_the_reset(ctl: Env, bmcs: Bmcs) -> None:
    """No ca.crt in the Secret: the emulator's certificate (of a CA the system does not trust)
    is refused, nothing is reset."""
    write_secret(ctl)
    system = SYSTEMS[0]  # never reset: the TLS handshake fails before any request
    _, node = redfish_pool(ctl, bmcs.system_url(system))
    states = list(bmcs.notices.states.get(system, []))
    ctl.raise_fault(node)
    failed = escalated_failure(ctl, node)
    assert f"the BMC {bmcs.url} (system /redfish/v1/Systems/{system})" in failed["message"]
    assert "CERTIFICATE_VERIFY_FAILED" in failed["message"]
    assert bmcs.notices.states.get(system, []) == states


def test_a_bmc_that_refuses_the_credentials_fails_the_reset(ctl: Env, bmcs: Bmcs) -> None:
    write_secret(ctl, password="wrong", ca=bmcs.ca.cert_pem)
    system = SYSTEMS[0]
    _, node = redfish_pool(ctl, bmcs.system_url(system))
    ctl.raise_fault(node)
    failed = escalated_failure(ctl, node)
    assert f"the BMC {bmcs.url} (system /redfish/v1/Systems/{system}) answered HTTP 401" in failed["message"]
    assert "wrong" not in failed["message"] and PASSWORD not in failed["message"]


def test_a_bmc_that_does_not_answer_fails_the_reset(ctl: Env) -> None:
    write_secret(ctl)
    silent = SilentBmc()
    try:
        _, node = redfish_pool(ctl, f"{silent.url}/redfish/v1/Systems/1", requestTimeoutSeconds=2)
        ctl.raise_fault(node)
        failed = escalated_failure(ctl, node)
    finally:
        silent.close()
    assert f"the BMC {silent.url} (system /redfish/v1/Systems/1) failed while connecting" in failed["message"]
    assert "Read timed out. (read timeout=2" in failed["message"]


def test_a_system_that_stays_off_fails_the_reset_after_asking_for_on(ctl: Env) -> None:
    write_secret(ctl)
    off = OffBmc()
    try:
        _, node = redfish_pool(ctl, off.url + OffBmc.SYSTEM, powerOnAfterSeconds=2)
        ctl.raise_fault(node)
        failed = escalated_failure(ctl, node)
    finally:
        off.close()
    assert off.resets == ["ForceRestart", "On"]
    assert (f"the BMC {off.url} (system {OffBmc.SYSTEM}) kept the system powered off after ForceRestart and "
            "then On (2s each)") in failed["message"]


def test_a_node_without_its_systems_url_is_refused_before_anything_is_drained(ctl: Env) -> None:
    _, node = redfish_pool(ctl, None)
    ctl.raise_fault(node)
    record = wait_for("the repair held", lambda: next(
        (r for r in ctl.records(node) if (r.get("status") or {}).get("hold") == "ProviderRefusedNode"), None))
    assert ctl.names.redfish_system_annotation in record["status"]["message"]
    blocked = ctl.wait_reason(node, n.EVENT_BLOCKED)
    assert ctl.names.redfish_system_annotation in blocked["message"]
    assert not ctl.node(node).get("spec", {}).get("unschedulable")  # never cordoned nor drained
