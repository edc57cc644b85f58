"""When the platform fails: the kube-apiserver killed (-9) and restarted, etcd killed (-9) and
restarted, etcd compacted so that the controller's watches get 410 Gone, each with repairs
parked at every phase under auto and propose (issue 28 item 1).

One local cluster of the module's own serves the three cases (the session cluster is never
touched), with one controller process that must live through all of them: its lease outlasts
each outage, so what recovers is its informers, not a fresh process. The figures each case
prints are the ones docs/operations.md, "When the platform fails", quotes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.processes import free_port
from autoclusters.devcluster.tools import ToolsMissing
from autoclusters.kube import KubeError
from autoclusters.kube.informer import LIST_ERROR, LIST_EXPIRED
from tests.integration.controller_support import Env, controller_env
from tests.integration.helpers import wait_for
from tests.integration.platform_apiserver_support import (
    INFORMERS,
    Platform,
    compact,
    finish,
    late_fault,
    newest_version,
    park,
    say,
)

pytestmark = pytest.mark.integration

# The controller's lease outlasts every outage here (the API server starts again in a few
# seconds, more on a loaded machine): it keeps leading, and its informers must recover.
LEASE = {"lease_seconds": "60", "renew_deadline_seconds": "45", "retry_period_seconds": "1",
         # and a repaired node's verification outlasts it too (the detector cannot write meanwhile)
         "verify_timeout_seconds": "60"}
# Each watch is resumed after 2 s (a deployment's default is 240 s): a watch from a version
# etcd compacted meanwhile answers 410 Gone within the test's time.
WATCH_SECONDS = "2"


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from tests.conftest import tool_missing

    local = LocalCluster(f"pytest-platform-{os.getpid()}")
    try:
        local.up(progress=lambda msg: say(f"cluster: {msg}"))
    except ToolsMissing as e:
        tool_missing(str(e))
    try:
        handle = ClusterHandle(str(local.kubeconfig), local=True, opa_url=local.opa_url,
                               state_dir=tmp_path_factory.mktemp("platform-handle"))
        handle.dev = local
        port = free_port()
        logs = Path(os.environ.get("AUTOCLUSTERS_TEST_CONTROLLER_LOGS") or tmp_path_factory.mktemp("platform-logs"))
        with controller_env(handle, logs, owner="plat", metrics_port=str(port), watch_seconds=WATCH_SECONDS,
                            **LEASE) as env:
            platform = Platform(local, env, f"http://127.0.0.1:{port}/metrics")
            wait_for("the controller's metrics", platform.lists)
            yield platform
    finally:
        local.down()


def writes(env: Env, node: str) -> bool:
    """A write goes through (an annotation of ``node``): the API server has its etcd back."""
    try:
        env.kube.patch_node(node, {"metadata": {"annotations": {"tests.autoclusters.io/etcd-back": "true"}}})
    except KubeError:
        return False
    return True


@pytest.fixture()
def env(platform: Platform) -> Iterator[Env]:
    yield platform.env
    platform.controller_alive()


def test_kube_apiserver_killed_and_restarted_mid_repair(platform: Platform, env: Env) -> None:
    with env.workload_namespace("plat") as ns:
        parked = park(env, ns)
        late = late_fault(env)
        before = platform.lists()
        env.raise_fault(late)  # acknowledged by etcd, perhaps never seen by the controller's watch
        t0 = time.monotonic()
        platform.local.kill_component("kube-apiserver")
        down = time.monotonic()
        platform.local.start_component("kube-apiserver")  # same ports, same etcd, same certificates
        back = time.monotonic()
        # every watch broke: every informer listed again (after its backoff), each collection whole
        platform.wait_lists(LIST_ERROR, before)
        relisted = time.monotonic() - back
        took = finish(env, parked, [late], back)
        say(f"kube-apiserver -9: down {back - down:.1f}s (kill {down - t0:.1f}s); informers listed again "
            f"{relisted:.1f}s after it was ready; all {len(parked.nodes()) + 1} repairs Succeeded {took:.1f}s "
            f"after it was ready")


def test_etcd_killed_and_restarted_mid_repair(platform: Platform, env: Env) -> None:
    with env.workload_namespace("plat") as ns:
        parked = park(env, ns)
        late = late_fault(env)
        before = platform.lists()
        env.raise_fault(late)
        t0 = time.monotonic()
        platform.local.kill_component("etcd")
        # while etcd is down the API server answers no write: the controller's fail and are retried
        platform.local.start_component("etcd")  # the same data directory and ports
        back = time.monotonic()
        wait_for("the API server writing to the restarted etcd", lambda: writes(env, late))
        took = finish(env, parked, [late], back)
        after = platform.lists()
        relists = {i: {r: after[(i, r)] - before[(i, r)] for r in (LIST_EXPIRED, LIST_ERROR)} for i in INFORMERS}
        say(f"etcd -9: down {back - t0:.1f}s; informers' lists since: {relists}; all {len(parked.nodes()) + 1} "
            f"repairs Succeeded {took:.1f}s after etcd was back")


def test_etcd_compacted_watches_get_410_and_the_informers_list_again(platform: Platform, env: Env) -> None:
    # A watch served by the API server's watch cache never sees a compaction (the cache holds its
    # own history); one served by etcd does, when it is resumed from a version etcd no longer
    # holds: the API server runs without the cache here (as for a resource whose cache size is 0).
    before = platform.lists()
    platform.local.kill_component("kube-apiserver")
    platform.local.start_component("kube-apiserver", flags=["--watch-cache=false"])
    platform.wait_lists(LIST_ERROR, before)
    with env.workload_namespace("plat") as ns:
        parked = park(env, ns)
        before = platform.lists()
        t0 = time.monotonic()
        revision = compact(platform.local)
        # Each watch resumes within WATCH_SECONDS from the last version it saw. One whose collection
        # had no change since the compaction resumes from a version etcd no longer holds: 410 Gone,
        # and a fresh list at once. One whose collection changed meanwhile went on to the newer
        # version (its next resume succeeds: nothing to list). Every informer is one or the other;
        # the default policy's ConfigMap is changed by nobody here, so it is the first kind (pools
        # may move on: the controller writes their status after a node's change).
        def settled() -> dict[str, str] | None:
            now = platform.lists()
            out = {i: "410" if now[(i, LIST_EXPIRED)] > before[(i, LIST_EXPIRED)]
                   else "moved on" if newest_version(env, i) > revision else "" for i in INFORMERS}
            return out if all(out.values()) else None

        answers = wait_for(f"every informer's watch past the compaction at {revision}", settled, timeout=30)
        relisted = time.monotonic() - t0
        assert answers["default-pool"] == "410", answers
        late = late_fault(env)
        env.raise_fault(late)  # after the fresh lists: the watches go on from them
        took = finish(env, parked, [late], t0)
        after = platform.lists()
        assert all(after[(i, LIST_ERROR)] == before[(i, LIST_ERROR)] for i in INFORMERS), (before, after)
        say(f"etcd compacted at revision {revision}: watches {answers}, settled {relisted:.1f}s later; "
            f"all {len(parked.nodes()) + 1} repairs Succeeded {took:.1f}s after the compaction")
