"""The warning before the drain, without a cluster: who is waited for, how long, and that a
restart resumes the wait without warning twice or waiting again once eviction started."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from autoclusters import names as n
from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller import drain
from autoclusters.controller import hook as hooks
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.pool_policy import parse_pool
from autoclusters.controller.remediation_record import state_of, status_of
from autoclusters.controller.statemachine import (
    HOLD_NO_PROVIDER,
    ClearWarning,
    Decision,
    Drain,
    DriveProvider,
    Emit,
    EnsureMarked,
    Fault,
    NodeView,
    Observation,
    PodsView,
    PoolView,
    ProviderBlock,
    RepairPolicy,
    RepairState,
    Unmark,
    Warn,
    drain_reason,
    transition,
)
from autoclusters.kube.events import ObjectRef
from autoclusters.names import Names
from autoclusters.pools.pool_config import (
    PoolConfigError,
    PreDrain,
    PreDrainHook,
    gpu_node_pool_object,
    pool_from_config,
)
from autoclusters.providers.types import ProviderState, ProviderView
from tests.unit import builders
from tests.unit.fakeapi import ApiError, FakeApi, Request

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
XID79 = Fault("gpu", "79", n.REASON_XID, "GPU 3 reported Xid 79 (GPU has fallen off the bus).")
REC = "n1-abc"
P = RepairPolicy(reset_drain_seconds=300, replace_drain_seconds=600, poll_seconds=1, pre_drain_wait_seconds=120)
SLURM = replace(P, acknowledgers=("slurm",))
NAMES = Names()


ONE_POD = PodsView(evictable=1)


def obs(pods: PodsView = ONE_POD, **node_kw: object) -> Observation:
    return Observation(node=replace(NodeView(name="n1", boot_id="boot-1"), **node_kw),  # type: ignore[arg-type]
                       fault=XID79, fault_action=RepairAction.RESET, pool=PoolView("pool-a", ConsentMode.AUTO),
                       pods=pods)


def run(state: RepairState | None, o: Observation, at: datetime = T0, p: RepairPolicy = P) -> Decision:
    return transition(state, o, at, p, record_name=REC)


def emitted(d: Decision) -> list[str]:
    return [a.reason for a in d.actions if isinstance(a, Emit)]


# --- the warning goes out first --------------------------------------------------------------
def test_the_warning_precedes_the_cordon_and_any_eviction() -> None:
    d = run(None, obs(), p=SLURM)
    assert d.state is not None and d.state.phase == Phase.DRAINING
    kinds = [type(a).__name__ for a in d.actions if not isinstance(a, Emit)]
    assert kinds == ["EnsureMarked", "Warn"]  # the node's warning and its cordon are one write, then the pods
    assert not any(isinstance(a, Drain) for a in d.actions)  # the slurm acknowledger has not acked
    warn = next(a for a in d.actions if isinstance(a, Warn))
    assert d.actions[0] == EnsureMarked(cordon=True, warning=warn)
    assert warn.call_hook and warn.deadline == T0 + timedelta(seconds=120) == d.state.pre_drain_deadline
    assert warn.reason == f"GPU 3 reported Xid 79 (GPU has fallen off the bus) (remediation {REC})"
    assert d.state.eviction_started is None and n.EVENT_DRAIN_WARNING in emitted(d)
    assert d.state.message == "Waiting until 2026-03-01T12:02:00Z at the latest for an acknowledgement from slurm."
    assert d.state.steps[-1].phase == "Draining" and "started" in d.state.steps[-1].message


def test_nothing_to_wait_for_evicts_at_once() -> None:
    d = run(None, obs())
    assert d.state is not None and d.state.eviction_started == T0
    assert Drain(force=False) in d.actions and n.EVENT_DRAIN_WAIT_ENDED not in emitted(d)
    actions = [a for a in d.actions if not isinstance(a, Emit)]
    mark = next(i for i, a in enumerate(actions) if isinstance(a, EnsureMarked) and a.cordon and a.warning)
    warn = next(i for i, a in enumerate(actions) if isinstance(a, Warn))
    assert mark < warn < actions.index(Drain(force=False))


def test_an_acknowledgement_ends_the_wait_early() -> None:
    waiting = run(None, obs(), p=SLURM).state
    d = run(waiting, obs(warned_for=REC, drain_acks={"slurm": REC}), T0 + timedelta(seconds=5), SLURM)
    assert d.state is not None and d.state.eviction_started == T0 + timedelta(seconds=5)
    assert Drain(force=False) in d.actions
    assert emitted(d) == [n.EVENT_DRAIN_WAIT_ENDED] and "arrived (slurm)" in d.state.message


def test_a_stale_acknowledgement_does_not_count() -> None:
    waiting = run(None, obs(), p=SLURM).state
    d = run(waiting, obs(warned_for=REC, drain_acks={"slurm": "n1-older-record"}), T0 + timedelta(seconds=5), SLURM)
    assert d.state == waiting and not any(isinstance(a, Drain) for a in d.actions)
    assert d.requeue_after == 1


def test_the_deadline_holds_when_nobody_acknowledges() -> None:
    waiting = run(None, obs(), p=SLURM).state
    before = run(waiting, obs(warned_for=REC), T0 + timedelta(seconds=119.5), SLURM)
    assert before.state == waiting and before.requeue_after == pytest.approx(0.5)
    at = run(waiting, obs(warned_for=REC), T0 + timedelta(seconds=120), SLURM)
    assert at.state is not None and at.state.eviction_started == T0 + timedelta(seconds=120)
    assert Drain(force=False) in at.actions
    assert "without an acknowledgement from slurm:" in at.state.message


def test_pods_that_asked_to_be_waited_for_must_ack_too() -> None:
    pods = PodsView(evictable=2, warned_for=(REC, REC), wait_acks=(("train/worker-0", ""),))
    waiting = run(None, obs(pods))
    assert waiting.state is not None and waiting.state.eviction_started is None
    still = run(waiting.state, obs(pods, warned_for=REC), T0 + timedelta(seconds=10))
    assert not any(isinstance(a, Drain) for a in still.actions)
    acked = replace(pods, wait_acks=(("train/worker-0", REC),))
    d = run(waiting.state, obs(acked, warned_for=REC), T0 + timedelta(seconds=11))
    assert Drain(force=False) in d.actions and d.state is not None and "pod train/worker-0" in d.state.message


def test_the_wait_never_outlasts_the_drain_deadline() -> None:
    long = replace(SLURM, pre_drain_wait_seconds=3600)
    d = run(None, obs(), p=long)
    assert d.state is not None and d.state.pre_drain_deadline == T0 + timedelta(seconds=300)


def test_a_pod_without_the_warning_is_warned_without_a_second_hook_call() -> None:
    """The node carries the warning, so the plan that wrote it called the hook: a pod that
    arrived since is warned, the hook is not called again."""
    waiting = _state()
    arrived = run(waiting, obs(PodsView(evictable=1, warned_for=("",)), warned_for=REC), T0 + timedelta(seconds=1),
                  SLURM)
    warns = [a for a in arrived.actions if isinstance(a, Warn)]
    assert len(warns) == 1 and not warns[0].call_hook and warns[0].deadline == waiting.pre_drain_deadline
    done = run(waiting, obs(PodsView(evictable=1, warned_for=(REC,)), warned_for=REC), T0 + timedelta(seconds=2),
               SLURM)
    assert not any(isinstance(a, Warn) for a in done.actions) and emitted(done) == []
    assert done.actions == (EnsureMarked(cordon=True, warning=warns[0]),)  # the node has it all: no request


@pytest.mark.parametrize("p", [P, SLURM], ids=["evicting", "waiting"])
def test_a_node_without_the_warning_gets_it_again_with_the_hook_call(p: RepairPolicy) -> None:
    """The patch that marks, cordons and warns the node as the repair starts was refused (or a
    crash came before it): the plan that asked for the hook stopped there. The next look asks
    for the whole marking again and for the hook, once; then nothing more."""
    started = run(None, obs(), p=p).state
    assert started is not None and started.phase == Phase.DRAINING
    again = run(started, obs(), T0 + timedelta(seconds=1), p)
    warn = Warn(deadline_of(started), drain_reason(XID79, REC), call_hook=True)
    assert [a for a in again.actions if not isinstance(a, Emit | Drain)] == [
        EnsureMarked(cordon=True, warning=warn), warn]
    later = run(started, obs(warned_for=REC), T0 + timedelta(seconds=2), p)
    assert not any(isinstance(a, Warn) for a in later.actions)


def test_a_repair_acting_on_a_node_without_the_warning_marks_it_and_calls_the_hook_before_the_provider() -> None:
    """Nothing to drain: the refused patch was in the plan that went on to Acting, and the
    provider was not asked either (it comes after the write)."""
    acting = run(None, obs(PodsView())).state
    assert acting is not None and acting.phase == Phase.ACTING
    d = run(acting, obs(PodsView()), T0 + timedelta(seconds=1))
    kinds = [type(a).__name__ for a in d.actions]
    assert kinds == ["EnsureMarked", "Warn", "DriveProvider"]
    warn = d.actions[1]
    assert isinstance(warn, Warn) and warn.call_hook and d.actions[0] == EnsureMarked(cordon=True, warning=warn)
    marked = run(acting, obs(PodsView(), warned_for=REC), T0 + timedelta(seconds=1))
    assert [type(a).__name__ for a in marked.actions] == ["EnsureMarked", "DriveProvider"]
    # the provider has the operation: the plan that asked it called the hook; a warning gone
    # missing since is written again, without a second call
    running = run(acting, replace(obs(PodsView()), provider=ProviderView(ProviderState.RUNNING)),
                  T0 + timedelta(seconds=2))
    assert running.actions == (EnsureMarked(cordon=True, warning=replace(warn, call_hook=False)),
                               next(a for a in d.actions if isinstance(a, DriveProvider)))


def test_a_restart_resumes_the_same_wait_and_never_waits_again_once_evicting() -> None:
    """The record's status is the state: round-trip it as a controller restart would."""
    obj = {"metadata": {"name": REC}, "spec": {"node": "n1", "pool": "pool-a", "consentMode": "auto",
                                                "action": "reset", "fault": {"class": "gpu", "code": "79",
                                                                             "reason": XID79.reason,
                                                                             "message": XID79.message}}}
    waiting = run(None, obs(), p=SLURM).state
    assert waiting is not None
    restored = state_of({**obj, "status": json.loads(json.dumps(status_of(waiting)))})
    assert restored == waiting
    evicting = run(restored, obs(warned_for=REC, drain_acks={"slurm": REC}), T0 + timedelta(seconds=3), SLURM).state
    assert evicting is not None
    again = state_of({**obj, "status": json.loads(json.dumps(status_of(evicting)))})
    assert again == evicting and again.eviction_started == T0 + timedelta(seconds=3)
    # the ack is gone after the restart (someone removed it): eviction goes on, no new wait
    d = run(again, obs(warned_for=REC), T0 + timedelta(seconds=4), SLURM)
    assert Drain(force=False) in d.actions and not any(isinstance(a, Warn) for a in d.actions)
    assert d.state == again


def test_the_force_deadline_counts_from_the_warning() -> None:
    waiting = run(None, obs(), p=SLURM).state
    evicting = run(waiting, obs(warned_for=REC), T0 + timedelta(seconds=120), SLURM).state
    d = run(evicting, obs(warned_for=REC), T0 + timedelta(seconds=300), SLURM)
    assert Drain(force=True) in d.actions


def test_an_escalation_neither_warns_nor_waits_again() -> None:
    d = run(None, obs(PodsView()), p=SLURM)
    waiting = d.state
    acting = run(waiting, obs(PodsView(), warned_for=REC, drain_acks={"slurm": REC}), T0 + timedelta(seconds=1),
                 SLURM).state
    assert acting is not None and acting.phase == Phase.ACTING
    failed = run(acting, replace(obs(PodsView(), warned_for=REC), provider=ProviderView(ProviderState.FAILED)),
                 T0 + timedelta(seconds=2), SLURM)
    assert failed.state is not None and failed.state.action == RepairAction.REPLACE
    assert failed.state.phase == Phase.DRAINING and failed.state.eviction_started is not None  # no second wait
    assert not any(isinstance(a, Warn) for a in failed.actions)
    # the next look lists the pods: none, so straight to the replacement, still without a warning
    replacing = run(failed.state, obs(PodsView(), warned_for=REC), T0 + timedelta(seconds=2), SLURM)
    assert replacing.state is not None and replacing.state.phase == Phase.ACTING
    assert not any(isinstance(a, Warn) for a in replacing.actions)
    assert any(isinstance(a, DriveProvider) for a in replacing.actions)


def test_an_escalation_whose_reset_never_warned_warns_waits_and_calls_the_hook() -> None:
    """The reset's marking (and with it the warning) never reached the node: refused on every
    look until the operation timed out, so the provider was never asked either. The replacement
    is the repair's first drain that gets through: it warns, waits and calls the hook, once, and
    a restart in between keeps which attempt the warning belongs to."""
    waiting = run(None, obs(PodsView()), p=SLURM).state
    assert waiting is not None and waiting.warning_attempt == 1
    acting = run(waiting, obs(PodsView()), T0 + timedelta(seconds=120), SLURM).state  # the wait ran out
    assert acting is not None and acting.phase == Phase.ACTING and acting.attempts == 1
    timeout = acting.operation.started + timedelta(seconds=P.operation_timeout_seconds)  # type: ignore[union-attr]
    esc = run(acting, obs(PodsView()), timeout, SLURM)
    s = esc.state
    assert s is not None and s.action == RepairAction.REPLACE and s.phase == Phase.DRAINING
    assert s.eviction_started is None and s.warning_attempt == 2 and s.attempts == 1
    assert s.pre_drain_deadline == timeout + timedelta(seconds=120) and s.drain_started == timeout
    warn = Warn(s.pre_drain_deadline, drain_reason(XID79, REC), call_hook=True)
    assert [a for a in esc.actions if isinstance(a, Warn | EnsureMarked)] == [EnsureMarked(cordon=True, warning=warn),
                                                                             warn]
    assert n.EVENT_DRAIN_WARNING in emitted(esc) and any("never got the warning" in st.message for st in s.steps)
    obj = {"metadata": {"name": REC}, "spec": {"node": "n1", "pool": "pool-a", "consentMode": "auto",
                                                "action": "reset", "fault": {"class": "gpu", "code": "79"}}}
    restored = state_of({**obj, "status": json.loads(json.dumps(status_of(s)))})
    assert restored is not None and restored.warning_attempt == 2
    assert restored.pre_drain_deadline == s.pre_drain_deadline
    restored = replace(restored, fault=XID79)
    # refused again: the next look asks for it all again, hook included; nothing is evicted
    again = run(restored, obs(), timeout + timedelta(seconds=1), SLURM)
    assert warn in again.actions and not any(isinstance(a, Drain) for a in again.actions)
    # the node carries it (the hook was called): waiting for Slurm, no second call
    warned = run(restored, obs(warned_for=REC), timeout + timedelta(seconds=2), SLURM)
    assert not any(isinstance(a, Warn) and a.call_hook for a in warned.actions)
    assert not any(isinstance(a, Drain) for a in warned.actions)
    acked = obs(warned_for=REC, drain_acks={"slurm": REC})
    evicting = run(restored, acked, timeout + timedelta(seconds=3), SLURM)
    assert Drain(force=False) in evicting.actions and evicting.state is not None
    replacing = run(evicting.state, replace(acked, pods=PodsView()), timeout + timedelta(seconds=4), SLURM).state
    assert replacing is not None and replacing.phase == Phase.ACTING and replacing.attempts == 2
    # while the provider replaces the node, a warning gone missing is written again, without the call
    d = run(replacing, replace(obs(PodsView()), provider=ProviderView(ProviderState.RUNNING)),
            timeout + timedelta(seconds=5), SLURM)
    marks = [a for a in d.actions if isinstance(a, EnsureMarked)]
    assert marks and marks[0].warning is not None and not marks[0].warning.call_hook


def test_an_escalation_after_the_provider_was_asked_does_not_warn_again() -> None:
    """The provider reported the reset failed: it was asked, so the plan that asked it got past
    the marking and the hook, even if the node has lost the warning since (a reimaged host)."""
    acting = run(None, obs(PodsView())).state
    assert acting is not None and acting.phase == Phase.ACTING
    failed = run(acting, replace(obs(PodsView()), provider=ProviderView(ProviderState.FAILED)),
                 T0 + timedelta(seconds=5))
    assert failed.state is not None and failed.state.phase == Phase.DRAINING
    assert failed.state.pre_drain_deadline == acting.pre_drain_deadline and failed.state.warning_attempt == 1
    assert not any(isinstance(a, Warn) for a in failed.actions)
    assert [a for a in failed.actions if isinstance(a, EnsureMarked)] == [EnsureMarked(cordon=True)]


def test_the_warning_is_cleared_when_the_repair_ends() -> None:
    acting = run(None, obs(PodsView())).state
    ok = run(acting, replace(obs(PodsView(), boot_id="boot-2"), fault=None,
                             provider=ProviderView(ProviderState.SUCCEEDED)), T0 + timedelta(seconds=5))
    verified = run(ok.state, replace(obs(PodsView(), boot_id="boot-2"), fault=None), T0 + timedelta(seconds=6))
    assert any(isinstance(a, Unmark) for a in ok.actions + verified.actions)
    replacing = run(None, replace(obs(PodsView()), fault_action=RepairAction.REPLACE)).state
    failed = run(replacing, replace(obs(PodsView()), provider=ProviderView(ProviderState.FAILED)),
                 T0 + timedelta(seconds=5))
    assert failed.state is not None and failed.state.phase == Phase.FAILED
    assert EnsureMarked(clear_warning=True) in failed.actions  # labels stay for a human, in the same write


def test_drain_reason_names_the_fault_and_the_record() -> None:
    assert drain_reason(XID79, "r1") == "GPU 3 reported Xid 79 (GPU has fallen off the bus) (remediation r1)"
    assert drain_reason(Fault("gpu", "79", n.REASON_XID, ""), "r1") == "NvidiaXIDError 79 (remediation r1)"


# --- the pool's preDrain settings -------------------------------------------------------------
def test_pre_drain_defaults_are_written_out_and_reach_the_policy() -> None:
    pool = pool_from_config({"name": "a100"})
    spec = gpu_node_pool_object(pool, NAMES)["spec"]
    assert spec["preDrain"] == {"waitSeconds": 120, "acknowledgers": [], "slinky": False}
    custom = pool_from_config({"name": "a100", "preDrain": {
        "waitSeconds": 30, "acknowledgers": ["slurm"], "slinky": True,
        "hook": {"url": "https://hooks.example/predrain"}}})
    assert gpu_node_pool_object(custom, NAMES)["spec"]["preDrain"] == {
        "waitSeconds": 30, "acknowledgers": ["slurm"], "slinky": True,
        "hook": {"url": "https://hooks.example/predrain", "timeoutSeconds": 10}}
    policy = parse_pool(gpu_node_pool_object(custom, NAMES)).policy(P)
    assert (policy.pre_drain_wait_seconds, policy.acknowledgers, policy.slinky) == (30, ("slurm",), True)


@pytest.mark.parametrize(("pre_drain", "message"), [
    ({"waitSeconds": -1}, "preDrain.waitSeconds must be an integer >= 0"),
    ({"wait": 5}, "preDrain: unknown key(s) wait"),
    ({"acknowledgers": "slurm"}, "preDrain.acknowledgers must be a list of names"),
    ({"acknowledgers": ["Slurm"]}, "preDrain.acknowledgers entry 'Slurm'"),
    ({"acknowledgers": ["slurm", "slurm"]}, "lists a name twice"),
    ({"slinky": "yes"}, "preDrain.slinky must be true or false"),
    ({"hook": {}}, "preDrain.hook needs exactly one of url or command"),
    ({"hook": {"url": "ftp://x", }}, "must be an http:// or https:// URL"),
    ({"hook": {"url": "http://x", "command": ["/bin/true"]}}, "exactly one of url or command"),
    ({"hook": {"command": "/bin/true"}}, "preDrain.hook.command must be a list"),
    ({"hook": {"command": ["/bin/true"], "timeoutSeconds": 0}}, "preDrain.hook.timeoutSeconds must be"),
    ({"hook": {"command": ["/bin/true"], "timeoutSeconds": 121}},
     "preDrain.hook.timeoutSeconds must be an integer in 1..120, got 121"),
])
def test_bad_pre_drain_settings_are_named(pre_drain: dict[str, object], message: str) -> None:
    with pytest.raises(PoolConfigError, match=re.escape(message)) as err:
        pool_from_config({"name": "a100", "preDrain": pre_drain})
    assert str(err.value).startswith("pool 'a100': ")


# --- which pods, and what the deadline does to them ------------------------------------------
def _pod(name: str = "p", **meta: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "train", **meta}, "status": {}}


def _slurmd(*true: str) -> dict[str, object]:
    conds = [{"type": f"{n.SLINKY_STATE_PREFIX}{t}", "status": "True"} for t in true]
    return {"metadata": {"name": "slurmd-0", "namespace": "slurm"}, "status": {"conditions": conds}}


def test_a_busy_or_undrained_slurmd_pod_is_held_until_slurm_drained_it() -> None:
    assert drain.held_for_slurm(_slurmd("Allocated"))
    assert drain.held_for_slurm(_slurmd("Mixed", "Drain"))  # draining, not drained
    assert drain.held_for_slurm(_slurmd("Idle", "Drain", "Completing"))
    assert drain.held_for_slurm(_slurmd("Idle"))  # Slurm may still start a job there
    assert drain.held_for_slurm(_slurmd("Idle", "Drain", "Undrain"))
    assert not drain.held_for_slurm(_slurmd("Idle", "Drain"))  # DRAINED
    assert not drain.held_for_slurm(_pod())
    owned = _pod(ownerReferences=[{"kind": "NodeSet", "apiVersion": "slinky.slurm.net/v1beta1", "controller": True}])
    assert drain.is_slurmd_pod(owned) and drain.held_for_slurm(owned)  # no conditions mirrored yet


def test_at_the_deadline_a_pod_keeps_its_own_grace_period() -> None:
    assert drain.at_deadline(_pod(), T0) == drain.DeadlineStep.DELETE
    terminating = _pod(deletionTimestamp="2026-03-01T12:00:30Z")
    assert drain.at_deadline(terminating, T0) == drain.DeadlineStep.WAIT
    assert drain.at_deadline(terminating, T0 + timedelta(seconds=30)) == drain.DeadlineStep.DELETE_NOW


def test_wait_acks_list_only_pods_that_asked() -> None:
    pods = [_pod("a", labels={NAMES.drain_wait_label: "true"}, annotations={NAMES.pod_drain_ack: REC}),
            _pod("b", labels={NAMES.drain_wait_label: "true"}),
            _pod("c"),
            _pod("d", labels={NAMES.drain_wait_label: "true"}, deletionTimestamp="2026-03-01T12:00:30Z")]
    assert drain.wait_acks(pods, NAMES.drain_wait_label, NAMES.pod_drain_ack) == (("train/a", REC), ("train/b", ""))


# --- the hook ----------------------------------------------------------------------------------
def _state() -> RepairState:
    state = run(None, obs(), p=SLURM).state
    assert state is not None
    return state


def deadline_of(state: RepairState) -> datetime:
    """The warned deadline of a repair that waits before its drain."""
    assert state.pre_drain_deadline is not None
    return state.pre_drain_deadline


def test_command_hook_gets_the_payload_on_stdin_and_in_the_environment(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    script = ("import json, os, sys; d = json.load(sys.stdin); d['env'] = os.environ['AUTOCLUSTERS_REMEDIATION']; "
              f"open({str(out)!r}, 'w').write(json.dumps(d))")
    s = _state()
    hooks.call(PreDrainHook(command=(sys.executable, "-c", script)), hooks.payload(s, deadline_of(s), "why"))
    got = json.loads(out.read_text())
    assert got["node"] == "n1" and got["record"] == REC and got["env"] == REC
    assert got["deadline"] == "2026-03-01T12:02:00Z" and got["fault"]["code"] == "79" and got["reason"] == "why"


def test_a_failing_hook_is_reported_not_raised_as_anything_else(tmp_path: Path) -> None:
    s = _state()
    body = hooks.payload(s, deadline_of(s), "why")
    with pytest.raises(hooks.HookFailed, match="exited 3: nope"):
        hooks.call(PreDrainHook(command=(sys.executable, "-c", "import sys; sys.stderr.write('nope'); sys.exit(3)")),
                   body)
    with pytest.raises(hooks.HookFailed, match="did not finish within 1s"):
        hooks.call(PreDrainHook(command=(sys.executable, "-c", "import time; time.sleep(5)"), timeout_seconds=1),
                   body)
    with pytest.raises(hooks.HookFailed, match="could not be run"):
        hooks.call(PreDrainHook(command=(str(tmp_path / "missing"),)), body)


def test_http_hook_posts_json() -> None:
    got: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204 if self.path == "/ok" else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        s = _state()
        base = f"http://127.0.0.1:{server.server_port}"
        assert hooks.call(PreDrainHook(url=f"{base}/ok"), hooks.payload(s, deadline_of(s), "why")) == "HTTP 204"
        assert got[0]["record"] == REC and got[0]["node"] == "n1"
        with pytest.raises(hooks.HookFailed, match="answered HTTP 500"):
            hooks.call(PreDrainHook(url=f"{base}/bad"), hooks.payload(s, deadline_of(s), "why"))
    finally:
        server.shutdown()
        server.server_close()


# --- the actuator's writes, against a stand-in for the API ---------------------------------------
class _Cluster:
    """Node ``n1`` and its pods in the fake API server, written to by the real client."""

    NODE = "/api/v1/nodes/n1"

    def __init__(self, node_annotations: dict[str, str], pods: list[dict[str, Any]]) -> None:
        self.api = FakeApi()
        self.api.put("/api/v1/nodes", builders.node("n1", pool="", detected=False, annotations=node_annotations))
        for pod in pods:
            self.api.put("/api/v1/namespaces/train/pods", pod)
        self.kube = self.api.kube()

    @property
    def node(self) -> dict[str, Any]:
        return self.api.read(self.NODE) or {}

    def edit_node(self, change: Callable[[dict[str, Any]], object]) -> None:
        """Another writer (an admin, an acknowledger) changes the node."""
        self.api.edit(self.NODE, change)

    def pod(self, name: str) -> dict[str, Any]:
        return self.api.read(f"/api/v1/namespaces/train/pods/{name}") or {}

    def add_pod(self, name: str) -> None:
        self.api.put("/api/v1/namespaces/train/pods", builders.pod(name, "n1", "train"))

    def refuse(self, pod: str) -> None:
        """An admission webhook refuses every write of ``pod``."""
        def deny(req: Request) -> None:
            raise ApiError(403, "admission webhook denied the request")

        self.api.on_request("PATCH", f"/api/v1/namespaces/train/pods/{pod}", deny)

    @property
    def node_patches(self) -> list[Any]:
        """Merge patch bodies and JSON patch op lists sent for the node."""
        return [r.body for r in self.api.requests if r.verb == "PATCH" and r.path == self.NODE]

    @property
    def pod_patches(self) -> list[str]:
        return [r.path for r in self.api.requests if r.verb == "PATCH" and "/pods/" in r.path]


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((ref.kind, ref.namespace, reason))


def _actuator(node_annotations: dict[str, str]) -> tuple[Actuator, _Cluster, _Recorder]:
    from autoclusters.controller.notifier import LogNotifier

    pods = [builders.pod("a", "n1", "train"), builders.pod("b", "n1", "train", annotations={NAMES.remediation: REC}),
            builders.pod("ds", "n1", "train", owner_kind="DaemonSet")]
    cluster, rec = _Cluster(node_annotations, pods), _Recorder()
    return Actuator(cluster.kube, NAMES, rec, LogNotifier()), cluster, rec  # type: ignore[arg-type]


def test_warn_writes_the_node_once_and_each_unwarned_pod_with_an_event() -> None:
    act, kube, rec = _actuator({})
    s = _state()
    w = Warn(deadline_of(s), drain_reason(s.fault, s.name), slinky=True)
    act.run((EnsureMarked(cordon=True, warning=w), w), "n1", kube.node, s, None)
    ann = kube.node["metadata"]["annotations"]
    assert ann[NAMES.drain_deadline] == "2026-03-01T12:02:00Z" and ann[NAMES.remediation] == REC
    assert ann[NAMES.drain_reason] == w.reason and ann[n.SLINKY_CORDON_REASON] == f"autoclusters: {w.reason}"
    assert kube.pod_patches == ["/api/v1/namespaces/train/pods/a"]  # b was warned already; DaemonSet pods stay
    assert rec.events == [("Pod", "train", n.EVENT_DRAIN_WARNING)]
    act.run((EnsureMarked(cordon=True, warning=w), w), "n1", kube.node, s, None)  # idempotent: nothing again
    assert len(kube.node_patches) == 1 and len(kube.pod_patches) == 1 and len(rec.events) == 1


def test_an_admins_slinky_reason_is_neither_overwritten_nor_removed() -> None:
    act, kube, _ = _actuator({n.SLINKY_CORDON_REASON: "rack maintenance"})
    s = _state()
    w = Warn(deadline_of(s), "why", slinky=True)
    act.run((EnsureMarked(warning=w), w), "n1", kube.node, s, None)
    assert kube.node["metadata"]["annotations"][n.SLINKY_CORDON_REASON] == "rack maintenance"
    kube.edit_node(lambda o: o["metadata"]["annotations"].update({NAMES.drain_ack("slurm"): REC}))
    act.run((ClearWarning(),), "n1", kube.node, s, None)
    assert kube.node["metadata"]["annotations"] == {n.SLINKY_CORDON_REASON: "rack maintenance"}


def test_clearing_removes_the_warning_every_ack_and_our_slinky_reason() -> None:
    act, kube, _ = _actuator({"other.io/keep": "x"})
    s = _state()
    w = Warn(deadline_of(s), "why", slinky=True)
    act.run((EnsureMarked(warning=w), w), "n1", kube.node, s, None)
    kube.edit_node(lambda o: o["metadata"]["annotations"].update({NAMES.drain_ack("slurm"): REC,
                                                                   NAMES.drain_ack("old"): "r0"}))
    act.run((ClearWarning(),), "n1", kube.node, s, None)
    assert kube.node["metadata"]["annotations"] == {"other.io/keep": "x"}


def test_the_acknowledger_rule_is_one_pattern_in_parser_crd_and_rego() -> None:
    from pathlib import Path

    from autoclusters import pool_fields
    from autoclusters.deploy.crds import pool_schema

    pattern = pool_fields.ACKNOWLEDGERS.pattern
    schema = pool_schema()["properties"]["spec"]["properties"]["preDrain"]["properties"]
    assert schema["acknowledgers"]["items"]["pattern"] == pattern
    assert schema["waitSeconds"]["default"] == PreDrain().wait_seconds
    policies = Path(__file__).resolve().parents[3] / "policies" / "lib"
    assert pattern not in (policies / "pools.rego").read_text()  # the Rego reads it from the generated data
    assert pool_fields.rego_data()["settings"]["preDrain.acknowledgers"]["pattern"] == pattern


def test_the_warning_words_say_when_why_and_how_to_answer() -> None:
    from autoclusters.controller import messages as words

    s = _state()
    reason = drain_reason(s.fault, s.name)
    pod_msg = words.pod_drain_warning("n1", "reset", "2026-03-01T12:02:00Z", reason, NAMES.drain_wait_label,
                                      NAMES.pod_drain_ack, REC)
    assert "VM reset" in pod_msg and "2026-03-01T12:02:00Z" in pod_msg and reason in pod_msg
    assert f"{NAMES.pod_drain_ack}={REC}" in pod_msg and f"{NAMES.drain_wait_label}=true" in pod_msg
    for msg in (pod_msg, words.drain_warning("replace", "2026-03-01T12:02:00Z", 120, reason),
                words.drain_wait_acknowledged(["slurm"]), words.drain_wait_deadline(["slurm", "pod a/b"]),
                words.hook_failed("exit 3")):
        assert msg[:1].isupper() and msg.endswith(".") and ".." not in msg


def test_a_pod_that_cannot_be_annotated_still_gets_its_event_and_does_not_stop_the_warning() -> None:
    act, kube, rec = _actuator({})
    kube.add_pod("c")
    kube.refuse("a")
    s = _state()
    act.run((Warn(deadline_of(s), "why"),), "n1", kube.node, s, None)
    assert kube.pod_patches == ["/api/v1/namespaces/train/pods/a", "/api/v1/namespaces/train/pods/c"]
    assert [e[2] for e in rec.events] == [n.EVENT_DRAIN_WARNING, n.EVENT_DRAIN_WARNING]
    assert annotations_of(kube.pod("c"))[NAMES.remediation] == REC
    assert NAMES.remediation not in annotations_of(kube.pod("a"))


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def test_unmark_from_a_stale_read_leaves_a_cordon_set_since_alone() -> None:
    """A leftover cleanup decided on a stale copy (still labelled) lands on a node that was
    unmarked meanwhile and cordoned by an admin: the re-read node decides, the cordon stays."""
    act, kube, _ = _actuator({})
    kube.edit_node(lambda o: o["spec"].update(unschedulable=True))  # the admin's cordon, after our unmark
    stale = {"metadata": {"name": "n1", "resourceVersion": "0", "labels": {NAMES.maintenance_required: "true"}},
             "spec": {}}
    act.unmark(stale, uncordon=True)
    assert kube.node["spec"]["unschedulable"] is True
    kube.edit_node(lambda o: o["metadata"].update(labels={NAMES.maintenance_required: "true"}))
    patches = len(kube.node_patches)
    act.unmark(kube.node, uncordon=True)
    assert len(kube.node_patches) == patches + 1
    assert {"op": "remove", "path": "/spec/unschedulable"} in kube.node_patches[-1]  # still ours: uncordoned


def test_an_escalation_after_the_provider_was_removed_from_an_unwarned_node_warns() -> None:
    """The reset's provider was taken out of the pool mid-operation (its progress cannot be
    asked: the reconciler reports it failed with the pool's block) while the node never got the
    warning (its marking refused). Nobody can say the provider was asked, so the replacement
    warns, waits and calls the hook as a first drain does; with the warning on the node, the
    escalation drains under it as usual."""
    acting = run(None, obs(PodsView())).state
    assert acting is not None and acting.phase == Phase.ACTING
    removed = ProviderBlock(RepairAction.RESET, HOLD_NO_PROVIDER, "pool pool-a names no provider for reset")
    gone = replace(obs(PodsView()), provider=ProviderView(ProviderState.FAILED, removed.message),
                   provider_blocks=(removed,))
    esc = run(acting, gone, T0 + timedelta(seconds=5))
    s = esc.state
    assert s is not None and s.action == RepairAction.REPLACE and s.phase == Phase.DRAINING
    assert s.warning_attempt == 2 and s.eviction_started is None
    assert any(isinstance(a, Warn) and a.call_hook for a in esc.actions)
    assert n.EVENT_DRAIN_WARNING in emitted(esc) and any("never got the warning" in st.message for st in s.steps)
    # the node carries the warning: the provider may have been asked; no second warning
    warned = run(acting, replace(gone, node=replace(gone.node, warned_for=acting.name)), T0 + timedelta(seconds=5))
    assert warned.state is not None and warned.state.warning_attempt == 1
    assert warned.state.pre_drain_deadline == acting.pre_drain_deadline
    assert not any(isinstance(a, Warn) for a in warned.actions)
