"""What the unit tests of the providers that reset through a remote API (redfish, ec2) share."""

from __future__ import annotations

import socket
import time
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
from autoclusters.deploy import stack as stack_objects
from autoclusters.deploy.providers import KINDS, ProviderType
from autoclusters.names import Names
from autoclusters.providers.remote_reset import RemoteReset
from autoclusters.providers.types import Operation, ProviderView
from tests.unit.fakeapi import FakeApi
from tests.unit.rbac_calls import Grant, calls, grants, ungranted, unused


def wait_verdict(provider: RemoteReset, op: Operation, node: str, lookup: Any) -> ProviderView:
    """The operation's thread ends (its result recorded); then the provider's verdict."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if provider._results.result(op.id) is not None:
            break
        time.sleep(0.05)
    return provider.progress(op, node, "p", lookup)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connections are refused


def reset_once(provider: RemoteReset, fake: FakeApi, node: str = "a") -> ProviderView:
    """One reset operation of ``node`` (boot id boot-1) driven to the end of its requests: the verdict."""
    op = Operation("rec-a", RepairAction.RESET, FakeClock().now(), boot_id_before="boot-1")
    provider.drive(op, node, "p")
    return wait_verdict(provider, op, node, lambda name: fake.read(f"/api/v1/nodes/{name}"))


def assert_only_its_secret(fake: FakeApi, names: Names, namespace: str, kind: ProviderType, secret: str) -> None:
    """The provider's calls were granted to the controller, its RBAC rules were all used, and
    they are ``get`` of its one Secret, by name."""
    own = grants(stack_objects.rbac_objects(names, namespace), f"{namespace}:{CONTROLLER_SERVICE_ACCOUNT}")
    mine = {Grant(r.group, r.resource, v, namespace if r.namespaced else None, frozenset(r.names))
            for r in KINDS[kind].rbac for v in r.verbs}
    made = calls(fake)
    assert ungranted(made, own) == []
    assert unused(made, mine) == []
    assert mine == {Grant("", "secrets", "get", namespace, frozenset({secret}))}
