"""The leader's storage-version migration (controller/storage_migration.py) against the fake
API server: each object written back at ``api.VERSION`` once, then storedVersions trimmed;
nothing done when there is nothing to do or the CRDs are not upgraded yet; a failed write keeps
storedVersions and says so in a warning event on the CRD."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from autoclusters import api
from autoclusters.clock import FakeClock
from autoclusters.controller.storage_migration import CRDS_PATH, FAILED, MIGRATED, migrate_storage
from autoclusters.deploy.crds import crds
from autoclusters.kube import Kube
from autoclusters.kube.events import EventRecorder
from autoclusters.names import Names
from tests.unit.fakeapi import ApiError, FakeApi, Request

NAMES = Names()
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
OLD = api.OLD_VERSIONS[0]


def _world(stored: list[str], *, storage: str = api.VERSION) -> tuple[FakeApi, Kube, EventRecorder]:
    fake = FakeApi(clock=lambda: NOW)
    for crd in crds(NAMES):
        for v in crd["spec"]["versions"]:
            v["storage"] = v["name"] == storage
        fake.put(CRDS_PATH, {**crd, "status": {"storedVersions": stored}})
    # the fake has one store per group-version, no storage encoding: the objects are where the
    # migration reads them (api.VERSION); what is checked here is what it asks of the API server
    for resource, names in ((api.POOLS, ("a100", "h100")), (api.REMEDIATIONS, ("n1-1", "n2-1", "n3-1"))):
        for name in names:
            fake.put(Kube.custom_path(NAMES.api_group, api.VERSION, resource.plural),
                     {"apiVersion": f"{NAMES.api_group}/{OLD}", "kind": resource.kind, "metadata": {"name": name}})
    kube = fake.kube()
    return fake, kube, EventRecorder(kube, FakeClock(NOW), "autoclusters-controller")


def _stored(fake: FakeApi, resource: api.Resource) -> list[str]:
    crd = fake.read(f"{CRDS_PATH}/{NAMES.crd_name(resource)}")
    assert crd is not None
    return list(crd["status"]["storedVersions"])


def _events(fake: FakeApi) -> list[dict[str, Any]]:
    return fake.items("/api/v1/namespaces/default/events")


def test_every_object_is_written_back_once_then_stored_versions_name_only_the_new_one() -> None:
    fake, kube, recorder = _world([OLD, api.VERSION])
    done = migrate_storage(kube, NAMES, recorder)
    recorder.flush()
    assert [(m.rewritten, m.trimmed, m.failed, m.skipped) for m in done] == [(2, True, [], ""), (3, True, [], "")]
    puts = sorted(r.path for r in fake.requests if r.verb == "PUT")
    assert puts == sorted([Kube.custom_path(NAMES.api_group, api.VERSION, "gpunodepools", n) for n in ("a100", "h100")]
                          + [Kube.custom_path(NAMES.api_group, api.VERSION, "remediations", n)
                             for n in ("n1-1", "n2-1", "n3-1")])
    assert _stored(fake, api.POOLS) == _stored(fake, api.REMEDIATIONS) == [api.VERSION]
    events = _events(fake)
    assert sorted((e["reason"], e["involvedObject"]["name"]) for e in events) == [
        (MIGRATED, NAMES.crd_name(api.POOLS)), (MIGRATED, NAMES.crd_name(api.REMEDIATIONS))]
    assert all(e["involvedObject"]["kind"] == "CustomResourceDefinition" and e["type"] == "Normal" for e in events)
    assert f"storedVersions {OLD}, {api.VERSION} -> {api.VERSION}" in events[0]["message"]

    fake.requests.clear()  # a later leader's start: the CRDs read, nothing listed or written
    assert [m.skipped for m in migrate_storage(kube, NAMES, recorder)] == ["nothing stored at another version"] * 2
    assert {r.verb for r in fake.requests} == {"GET"}


def test_nothing_is_written_while_the_crds_still_store_at_the_old_version() -> None:
    """The controller rolled out before the CRDs were applied: it waits for them (next start)."""
    fake, kube, recorder = _world([OLD], storage=OLD)
    done = migrate_storage(kube, NAMES, recorder)
    assert all("apply the new CRDs" in m.skipped for m in done)
    assert {r.verb for r in fake.requests} == {"GET"}
    assert _stored(fake, api.POOLS) == [OLD]


def test_an_object_that_cannot_be_written_keeps_stored_versions_and_warns_on_the_crd() -> None:
    fake, kube, recorder = _world([OLD, api.VERSION])

    def refuse_h100(req: Request) -> None:
        if req.path.endswith("/h100"):
            raise ApiError(400, "admission webhook denied the request: the pool is invalid")

    fake.on_request("PUT", "/apis", refuse_h100)
    pools, records = migrate_storage(kube, NAMES, recorder)
    recorder.flush()
    assert (pools.rewritten, pools.trimmed, records.trimmed) == (1, False, True)
    assert pools.failed and pools.failed[0].startswith("h100 (admission webhook denied")
    assert _stored(fake, api.POOLS) == [OLD, api.VERSION] and _stored(fake, api.REMEDIATIONS) == [api.VERSION]
    warning = [e for e in _events(fake) if e["reason"] == FAILED]
    assert len(warning) == 1 and warning[0]["type"] == "Warning"
    assert warning[0]["involvedObject"]["name"] == NAMES.crd_name(api.POOLS)
    assert "not written: h100" in warning[0]["message"] and "the next leader tries again" in warning[0]["message"]


def test_a_concurrent_change_of_stored_versions_is_not_overwritten() -> None:
    """The trim tests the storedVersions it read: one that changed meanwhile is left as it is."""
    fake, kube, recorder = _world([OLD, api.VERSION])

    def and_the_crd_changes(req: Request) -> None:
        fake.edit(f"{CRDS_PATH}/{NAMES.crd_name(api.POOLS)}",
                  lambda c: c["status"].update(storedVersions=["v0", OLD, api.VERSION]))

    fake.on_request("PUT", "/apis", and_the_crd_changes)
    pools = migrate_storage(kube, NAMES, recorder, resources=(api.POOLS,))[0]
    assert not pools.trimmed and pools.failed[0].startswith("(storedVersions:")
    assert _stored(fake, api.POOLS) == ["v0", OLD, api.VERSION]
