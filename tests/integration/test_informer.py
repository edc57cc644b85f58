"""The informer against a real API server: its list's resourceVersion and its objects' are
etcd's revisions, so what the controller writes around a list is judged right by version.

The moment between a list's answer and its use is made with a wrapper of the client that
acts when the list comes back (the creates and deletes themselves are the API server's).
ConfigMaps in a namespace of the test's own: runs on any cluster a kubeconfig names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from autoclusters.kube import Kube
from autoclusters.kube.informer import Informer
from tests.integration.helpers import wait_for

JSON = dict[str, Any]


class _ActsAfterList:
    """``kube`` for an informer, calling ``then(n)`` when its n-th list has been answered,
    before the informer applies it."""

    def __init__(self, kube: Kube, then: Callable[[int], None]) -> None:
        self._kube = kube
        self._then = then
        self.lists = 0

    def list_with_version(self, path: str, **kw: Any) -> tuple[list[JSON], str]:
        answer = self._kube.list_with_version(path, **kw)
        self.lists += 1
        self._then(self.lists)
        return answer

    def watch(self, path: str, **kw: Any) -> Iterator[JSON]:
        return self._kube.watch(path, **kw)


class _HeldWatch(_ActsAfterList):
    """``kube`` for an informer whose watch events are held back while ``flowing`` is clear
    (a watch that lags behind our own writes); the events are the API server's."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, lambda n: None)
        self.flowing = threading.Event()
        self.flowing.set()

    def watch(self, path: str, **kw: Any) -> Iterator[JSON]:
        for event in self._kube.watch(path, **kw):
            assert self.flowing.wait(30), "the test never let the watch go on"
            yield event


@pytest.fixture()
def configmaps(kube: Kube, unique: str) -> Iterator[str]:
    ns = f"informer-{unique}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield f"/api/v1/namespaces/{ns}/configmaps"
    kube.delete(f"/api/v1/namespaces/{ns}")


LABEL = "autoclusters-test/informer"  # ours only: not the kube-root-ca.crt every namespace gets


def _cm(name: str, **data: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {LABEL: "1"}},
            "data": data}


def test_writes_around_a_list_are_judged_by_the_real_servers_versions(kube: Kube, configmaps: str) -> None:
    """b is created after the list was answered (and put into the store, as the controller
    does): it stays and is never handed over as deleted. c, written and then deleted before the
    list, is deleted. d, in the list but deleted by us after its answer, never comes back."""
    path = configmaps
    kube.create(path, _cm("a"))
    seen: list[tuple[str, bool, bool]] = []
    inf: Informer

    def after_list(n: int) -> None:
        if n > 1:
            return
        inf.upsert(kube.create(path, _cm("b")))
        kube.delete(f"{path}/d")
        inf.remove("d")

    client = _ActsAfterList(kube, after_list)
    inf = Informer(cast(Kube, client), path, lambda n, o, w: seen.append((n, o is not None, w is not None)),
                   label_selector=LABEL, name="configmaps")
    inf.upsert(kube.create(path, _cm("d")))  # read before the list, as a reconcile would have
    inf.upsert(kube.create(path, _cm("c")))
    kube.delete(f"{path}/c")
    inf.start()
    try:
        assert inf.synced.wait(30)
        kube.create(path, _cm("z"))  # after d's deletion: once z is here, the watch has told of it
        wait_for("z through the watch", lambda: inf.get("z"))
        assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "b", "z"]
        assert next(s for s in seen if s[0] == "b") == ("b", True, True)  # unchanged, never deleted
        assert not [s for s in seen if s[0] == "b" and not s[2]]
        assert ("c", True, False) in seen
        assert not [s for s in seen if s[0] == "d" and s[2]]  # never handed over again
        assert client.lists == 1
    finally:
        inf.stop()


def test_a_transform_that_raises_on_one_object_keeps_the_watch(kube: Kube, configmaps: str) -> None:
    """One ConfigMap the transform cannot take: the list ends, the others are stored, later
    changes flow through the same watch, and the object is taken in once it transforms."""
    path = configmaps
    for name in ("a", "poison"):
        kube.create(path, _cm(name, **({"broken": "1"} if name == "poison" else {})))

    def strict(cm: JSON) -> JSON:
        if "broken" in (cm.get("data") or {}):
            raise ValueError("a ConfigMap this reader cannot take")
        return cm

    client = _ActsAfterList(kube, lambda n: None)
    inf = Informer(cast(Kube, client), path, lambda *_: None, label_selector=LABEL, name="configmaps",
                   transform=strict, backoff=0.1)
    inf.start()
    try:
        assert inf.synced.wait(30), "one object's transform error stalled the list"
        assert [o["metadata"]["name"] for o in inf.items()] == ["a"] and inf.handler_errors == 1
        kube.create(path, _cm("b"))
        wait_for("b through the watch", lambda: inf.get("b"))
        kube.replace(f"{path}/poison", _cm("poison", healed="1"))
        wait_for("the healed object taken in", lambda: inf.get("poison"))
        assert client.lists == 1 and inf.handler_errors == 1
    finally:
        inf.stop()


def test_a_late_deletion_event_leaves_the_object_created_again_under_the_name(kube: Kube, configmaps: str) -> None:
    """a is deleted and created again by us, our create's answer put into the store, while the
    watch lags: the deletion event of the old a, told afterwards, carries the real server's
    version of the deletion, older than the new a's, so the new a stays in the store and is never
    handed over as deleted; the new a's own deletion later removes it."""
    path = configmaps
    kube.create(path, _cm("a"))
    seen: list[tuple[str, bool, bool]] = []  # (name, handed over as deleted, in the store then)
    inf: Informer

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        seen.append((name, new is None, inf.get(name) is not None))

    client = _HeldWatch(kube)
    inf = Informer(cast(Kube, client), path, handler, label_selector=LABEL, name="configmaps")
    inf.start()
    try:
        assert inf.synced.wait(30)
        first_uid = inf.get("a")["metadata"]["uid"]  # type: ignore[index]
        client.flowing.clear()
        kube.delete(f"{path}/a")
        again = kube.create(path, _cm("a", generation="2"))
        inf.upsert(again)
        assert again["metadata"]["uid"] != first_uid
        seen.clear()
        client.flowing.set()
        kube.create(path, _cm("z"))  # after a's re-creation: once z is here, the watch has told of it
        wait_for("z through the watch", lambda: inf.get("z"))
        assert [s for s in seen if s[0] == "a"] and not [s for s in seen if s[0] == "a" and (s[1] or not s[2])]
        assert inf.get("a")["metadata"]["uid"] == again["metadata"]["uid"]  # type: ignore[index]
        kube.delete(f"{path}/a")
        wait_for("the new a's own deletion", lambda: inf.get("a") is None)
        assert seen[-1] == ("a", True, False) and client.lists == 1
    finally:
        inf.stop()
