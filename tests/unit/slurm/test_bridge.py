"""The bridge's loop over a fake API and a fake Slurm: which nodes it looks at, what it
writes, and that one failing node neither stops the others nor escapes as an exception.
Pools and nodes come from the bridge's informers (seeded here as their watch would), never
from a list per poll: the only requests a poll makes to the fake API server are node patches."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoclusters.clock import FakeClock, utc_iso
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfig, gpu_node_pool_object
from autoclusters.pools.slurm_policy import SlurmPolicy
from autoclusters.slurm import decisions as d
from autoclusters.slurm.bridge import SlurmBridge
from autoclusters.slurm.bridge_metrics import registry
from autoclusters.slurm.commands import Result, Slurm
from tests.unit import builders
from tests.unit.fakeapi import FakeApi

NAMES = Names()
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


class Cluster:
    """Pools and nodes in the fake API server (``FakeApi``), which the bridge's real client
    writes to; ``patches`` are the node patches it sent, in order."""

    def __init__(self, pools: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        self.api = FakeApi()
        self.pools = pools
        for n in nodes:
            self.api.put("/api/v1/nodes", n)
        self.kube = self.api.kube()

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["metadata"]["name"]: n for n in self.api.items("/api/v1/nodes")}

    @property
    def patches(self) -> list[tuple[str, dict[str, Any]]]:
        return [(r.path.rsplit("/", 1)[1], r.body) for r in self.api.requests
                if r.verb == "PATCH" and r.path.startswith("/api/v1/nodes/")]


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, ref: Any, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((ref.name, reason, message))


class FakeSlurm:
    """sinfo/squeue answers by node; scontrol on ``broken`` fails."""

    def __init__(self, sinfo: str, squeue: dict[str, str], broken: str = "") -> None:
        self.sinfo, self.squeue, self.broken = sinfo, squeue, broken
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sinfo":
            return Result(0, self.sinfo, "")
        if argv[0] == "squeue":
            return Result(0, self.squeue.get(argv[argv.index("-w") + 1], "") if "-w" in argv else "", "")
        if self.broken and any(self.broken in a for a in argv):
            return Result(1, "", "slurm_update error: Unable to contact slurm controller")
        return Result(0, "", "")


def pool(name: str, enabled: bool) -> dict[str, Any]:
    return gpu_node_pool_object(PoolConfig(name=name, slurm=SlurmPolicy(enabled=enabled, signal_lead_seconds=5)),
                                NAMES)


def node(name: str, pool_name: str, warned: bool = False) -> dict[str, Any]:
    ann = {NAMES.drain_deadline: utc_iso(NOW + timedelta(seconds=60)), NAMES.drain_reason: f"Xid 79 ({name}-r)",
           NAMES.remediation: f"{name}-r"} if warned else {}
    return builders.node(name, pool_name, annotations=ann, detected=False)


def record_for(n: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The open Remediation record that backs the warning on ``n`` (as the controller writes it)."""
    ann = n["metadata"]["annotations"]
    obj = {"metadata": {"name": ann[NAMES.remediation]},
           "spec": {"node": n["metadata"]["name"], "pool": n["metadata"]["labels"][NAMES.pool_label]},
           "status": {"phase": "Draining", "preDrainDeadline": ann[NAMES.drain_deadline]}}
    for path, value in changes.items():
        part, key = path.split("__")
        obj[part][key] = value
    return obj


def bridge(kube: Cluster, slurm: FakeSlurm, *, records: bool = True) -> tuple[SlurmBridge, FakeRecorder]:
    rec = FakeRecorder()
    b = SlurmBridge(kube.kube, Slurm(slurm), NAMES, FakeClock(NOW), recorder=rec)  # type: ignore[arg-type]  # events recorded, not sent
    for p in kube.pools:
        b.pools.upsert(p)
    for n in kube.nodes.values():
        b.nodes.upsert(copy.deepcopy(n))
        if records and NAMES.drain_deadline in n["metadata"]["annotations"]:
            b.records.upsert(record_for(n))
    return b, rec


def test_only_nodes_of_slurm_enabled_pools_are_looked_at() -> None:
    kube = Cluster([pool("slurm", True), pool("plain", False)],
                    [node("a-0", "slurm", warned=True), node("b-0", "plain", warned=True)])
    slurm = FakeSlurm("a-0|mixed|Unknown|Unknown|none\n", {"a-0": "7|RUNNING|1|0|1|a-0\n"})
    b, rec = bridge(kube, slurm)
    b.sync_once()
    assert ["scontrol", "update", "NodeName=a-0", "State=DRAIN", "Reason=autoclusters: Xid 79 (a-0-r)"] in slurm.calls
    assert ["scancel", "--signal=TERM", "7"] in slurm.calls
    assert not any("b-0" in " ".join(c) for c in slurm.calls)
    assert [r for _, r, _ in rec.events] == [d.EVENT_DRAINED, d.EVENT_SIGNALLED]
    assert b.memory["a-0"].signalled == {"7": NOW}
    assert {verb for verb, _ in kube.api.counts()} == {"PATCH"}  # no list per poll: the informers' caches


def test_a_failing_node_is_reported_and_the_others_go_on() -> None:
    kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True), node("a-1", "slurm", warned=True)])
    slurm = FakeSlurm("a-0|idle|Unknown|Unknown|none\na-1|idle|Unknown|Unknown|none\n", {}, broken="a-0")
    b, rec = bridge(kube, slurm)
    b.sync_once()
    assert (("a-0", d.EVENT_FAILED) in {(n, r) for n, r, _ in rec.events})
    assert ["scontrol", "update", "NodeName=a-1", "State=DRAIN", "Reason=autoclusters: Xid 79 (a-1-r)"] in slurm.calls
    assert b.stats.errors == 1 and "a-0" in b.stats.last_error


def test_a_node_the_bridge_cannot_read_is_that_nodes_error_alone_counted_and_exported(caplog) -> None:
    """A hand-edited drain deadline that is no time (a bug of ours to meet, not a Slurm or API
    error) used to end the bridge's loop for every node; now it is logged with the node's name
    (the traceback once), counted, exported, and the other node is drained."""
    bad = node("a-0", "slurm", warned=True)
    bad["metadata"]["annotations"][NAMES.drain_deadline] = "not a time"
    kube = Cluster([pool("slurm", True)], [bad, node("a-1", "slurm", warned=True)])
    slurm = FakeSlurm("a-0|idle|Unknown|Unknown|none\na-1|idle|Unknown|Unknown|none\n", {})
    b, _ = bridge(kube, slurm)
    b.sync_once()
    b.sync_once()
    assert ["scontrol", "update", "NodeName=a-1", "State=DRAIN", "Reason=autoclusters: Xid 79 (a-1-r)"] in slurm.calls
    assert b.stats.node_errors == 2 and b.stats.poll_errors == 0 and "a-0" in b.stats.last_error
    logged = [r for r in caplog.records if "a-0" in r.getMessage()]
    assert [r.exc_info is not None for r in logged] == [True, False]  # the traceback once, then one line
    r = registry(b)
    assert r.get_sample_value("autoclusters_slurm_bridge_errors_total", {"scope": "node"}) == 2
    assert r.get_sample_value("autoclusters_slurm_bridge_errors_total", {"scope": "poll"}) == 0
    assert r.get_sample_value("autoclusters_slurm_bridge_polls_total") == 2
    for informer in ("gpunodepools", "nodes", "remediations"):
        assert r.get_sample_value("autoclusters_informer_handler_errors_total", {"informer": informer}) == 0


def test_the_bridges_informer_handler_errors_are_exported_under_the_shared_name() -> None:
    kube = Cluster([pool("slurm", True)], [])
    b, _ = bridge(kube, FakeSlurm("", {}))

    def buggy(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        raise ValueError(name)  # the bridge's own handlers do nothing; a bug in one stands in

    b.nodes._handler = buggy
    b.nodes.upsert(node("a-0", "slurm"))
    b.nodes._apply({"type": "MODIFIED", "object": {**node("a-0", "slurm"), "spec": {"unschedulable": True}}})
    assert registry(b).get_sample_value("autoclusters_informer_handler_errors_total", {"informer": "nodes"}) == 1


class UndecodableSinfo(FakeSlurm):
    """``sinfo`` whose output cannot be decoded for its first ``failures`` calls (as the real
    runner's could not, before it replaced bytes that are not UTF-8): an error neither the API
    server's nor Slurm's, outside the per-node part of the poll."""

    def __init__(self, sinfo: str, failures: int) -> None:
        super().__init__(sinfo, {})
        self.failures = failures

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        if argv[0] == "sinfo" and self.failures:
            self.failures -= 1
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return super().__call__(argv, timeout)


def test_an_unexpected_error_outside_the_per_node_part_is_logged_counted_backed_off_and_the_bridge_goes_on(
        caplog) -> None:
    """An error outside the per-node loop that is neither a KubeError nor a SlurmError used to end
    the bridge (its loop caught only those two). Now each such poll is logged (the traceback once,
    one line while it repeats), counted as a failed poll (exported), waits longer after each
    failed poll in a row (from poll_seconds, doubling, up to max_backoff_seconds), and the first
    poll that succeeds does the work and brings the wait back to poll_seconds."""
    kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True)])
    slurm = UndecodableSinfo("a-0|idle|Unknown|Unknown|none\n", failures=4)
    b, _ = bridge(kube, slurm)
    b.poll_seconds, b.max_backoff_seconds = 2.0, 10.0
    waits = [b.poll() for _ in range(4)]
    assert waits == [2.0, 4.0, 8.0, 10.0]
    assert b.stats.poll_errors == 4 and b.stats.polls == 4 and "UnicodeDecodeError" in b.stats.last_error
    logged = [r for r in caplog.records if r.name == "autoclusters.slurm.bridge"]
    assert [r.exc_info is not None for r in logged] == [True, False, False, False]
    assert registry(b).get_sample_value("autoclusters_slurm_bridge_errors_total", {"scope": "poll"}) == 4
    assert b.poll() == 2.0 and b.stats.poll_errors == 4
    assert ["scontrol", "update", "NodeName=a-0", "State=DRAIN", "Reason=autoclusters: Xid 79 (a-0-r)"] in slurm.calls
    slurm.failures = 1  # failing again after a success: the wait starts over, the traceback comes again
    assert b.poll() == 2.0
    assert [r.exc_info is not None for r in caplog.records if r.name == "autoclusters.slurm.bridge"][-1]


def test_a_failed_poll_never_waits_less_than_a_healthy_one() -> None:
    """A bridge that polls less often than the longest backoff (every 60 s, against the default
    30 s) must not poll a failing API server or slurmctld twice as often as a healthy one: the
    backoff starts at poll_seconds and only ever lengthens the wait."""
    kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True)])
    slurm = UndecodableSinfo("a-0|idle|Unknown|Unknown|none\n", failures=3)
    b, _ = bridge(kube, slurm)
    b.poll_seconds, b.max_backoff_seconds = 60.0, 30.0
    assert [b.poll() for _ in range(3)] == [60.0, 60.0, 60.0]
    assert b.stats.poll_errors == 3
    assert b.poll() == 60.0 and b.stats.poll_errors == 3


def test_the_ack_names_the_record_once_the_node_is_drained() -> None:
    kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True)])
    slurm = FakeSlurm("a-0|idle+drain|root|2026-11-30T03:00:00|autoclusters: Xid 79 (a-0-r)\n", {})
    b, _ = bridge(kube, slurm)
    b.sync_once()
    assert kube.patches == [("a-0", {"metadata": {"annotations": {NAMES.drain_ack("slurm"): "a-0-r"}}})]


def test_a_restarted_bridge_carries_on_from_what_it_wrote_on_the_node() -> None:
    first_kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True)])
    slurm = FakeSlurm("a-0|mixed+drain|root|2026-11-30T03:00:00|autoclusters: Xid 79 (a-0-r)\n",
                      {"a-0": "7|RUNNING|1|0|1|a-0\n"})
    first, _ = bridge(first_kube, slurm)
    first.sync_once()
    saved = first_kube.patches[-1][1]["metadata"]["annotations"][NAMES.slurm_jobs]
    assert d.Memory.from_json(saved) == d.Memory(record="a-0-r", signalled={"7": NOW}, restarts_at_signal={"7": 0})

    # The job saved and exited; a new bridge process finds it ended (FAILED) and requeues it.
    warned = node("a-0", "slurm", warned=True)
    warned["metadata"]["annotations"][NAMES.slurm_jobs] = saved
    kube = Cluster([pool("slurm", True)], [warned])

    class Ended(FakeSlurm):
        def __call__(self, argv: Sequence[str], timeout: float) -> Result:
            if argv[0] == "squeue" and "-j" in argv:
                self.calls.append(list(argv))
                return Result(0, "7|FAILED|1|0|1|a-0\n", "")
            return super().__call__(argv, timeout)

    ended = Ended("a-0|idle+drain|root|2026-11-30T03:00:00|autoclusters: Xid 79 (a-0-r)\n", {})
    second, _ = bridge(kube, ended)
    second.sync_once()
    assert ["scontrol", "requeue", "7"] in ended.calls
    assert not any(c[0] == "scancel" for c in ended.calls)


def test_the_saved_memory_is_removed_after_the_repair() -> None:
    done = node("a-0", "slurm")
    done["metadata"]["annotations"][NAMES.slurm_jobs] = d.Memory(record="a-0-r").to_json()
    kube = Cluster([pool("slurm", True)], [done])
    b, _ = bridge(kube, FakeSlurm("a-0|idle|Unknown|Unknown|none\n", {}))
    b.sync_once()
    assert ("a-0", {"metadata": {"annotations": {NAMES.slurm_jobs: None}}}) in kube.patches


def test_a_node_it_patched_is_read_back_from_its_own_write_not_an_older_copy() -> None:
    kube = Cluster([pool("slurm", True)], [node("a-0", "slurm", warned=True)])
    slurm = FakeSlurm("a-0|idle+drain|root|2026-11-30T03:00:00|autoclusters: Xid 79 (a-0-r)\n", {})
    b, _ = bridge(kube, slurm)
    b.sync_once()
    b.sync_once()  # before any watch event: the store holds the acknowledged node already
    assert kube.patches == [("a-0", {"metadata": {"annotations": {NAMES.drain_ack("slurm"): "a-0-r"}}})]
    assert b.nodes.get("a-0")["metadata"]["annotations"][NAMES.drain_ack("slurm")] == "a-0-r"  # type: ignore[index]


@pytest.mark.timeout(60)  # were the flag ignored, the bridge would start and run until killed
def test_the_cli_serves_the_bridges_metrics_where_it_is_told(tmp_path, capsys) -> None:
    """``slurm-bridge run --metrics-port``: a port already taken is a clear error before the
    bridge starts (the endpoint is built from the flags, not left to a default)."""
    import socket

    from autoclusters.cli import main as cli

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = cli.main(["slurm-bridge", "run", "--kubeconfig", str(kubeconfig), "--metrics-port", str(port),
                       "--metrics-address", "127.0.0.1"])
    assert rc != 0 and f"cannot serve metrics on 127.0.0.1:{port}" in capsys.readouterr().err


FORGERIES = {
    "no record": None,
    "another node's record": {"spec__node": "a-1"},
    "a closed record": {"status__phase": "Succeeded"},
    "another deadline": {"status__preDrainDeadline": utc_iso(NOW + timedelta(seconds=600))},
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_drain_warning_no_open_record_of_the_node_backs_drains_nothing(forgery: str) -> None:
    """Anyone who may patch a node can write the warning's annotations; only the record counts."""
    warned = node("a-0", "slurm", warned=True)
    kube = Cluster([pool("slurm", True)], [warned])
    slurm = FakeSlurm("a-0|mixed|Unknown|Unknown|none\n", {"a-0": "7|RUNNING|1|0|1|a-0\n"})
    b, rec = bridge(kube, slurm, records=False)
    changes = FORGERIES[forgery]
    if changes is not None:
        b.records.upsert(record_for(warned, **changes))
    clock = b.clock
    assert isinstance(clock, FakeClock)
    b.sync_once()
    assert [c[0] for c in slurm.calls] == ["sinfo"] and kube.patches == [] and rec.events == []
    clock.advance(31)  # still unbacked after the grace: reported, once
    b.sync_once()
    b.sync_once()
    assert [c[0] for c in slurm.calls] == ["sinfo"] * 3 and kube.patches == []
    assert [r for _, r, _ in rec.events] == [d.EVENT_UNBACKED]
    # the record the controller writes next makes it a warning the bridge acts on
    b.records.upsert(record_for(warned))
    b.sync_once()
    assert ["scontrol", "update", "NodeName=a-0", "State=DRAIN", "Reason=autoclusters: Xid 79 (a-0-r)"] in slurm.calls


def test_a_warning_backed_within_the_grace_is_never_reported() -> None:
    warned = node("a-0", "slurm", warned=True)
    kube = Cluster([pool("slurm", True)], [warned])
    slurm = FakeSlurm("a-0|mixed|Unknown|Unknown|none\n", {"a-0": "7|RUNNING|1|0|1|a-0\n"})
    b, rec = bridge(kube, slurm, records=False)
    b.sync_once()
    b.records.upsert(record_for(warned))
    assert isinstance(b.clock, FakeClock)
    b.clock.advance(31)
    b.sync_once()
    assert d.EVENT_UNBACKED not in [r for _, r, _ in rec.events]
    assert d.EVENT_DRAINED in [r for _, r, _ in rec.events]
