"""The repair events' words, under the default brand and the reference brand: each is whole
sentences, names the repair (VM reset / node replacement), and the approval message names
the exact label and value to add with the installation's domain."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from autoclusters import names as n
from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller import messages as words
from autoclusters.controller.statemachine import (
    Decision,
    Emit,
    Fault,
    RepairPolicy,
    transition,
)
from autoclusters.providers.types import ProviderState, ProviderView
from tests.unit.controller.test_statemachine import T0, P, node, obs

BRANDS = [n.Names(), n.Names("crusoe.ai", "Crusoe")]


def emitted(d: Decision) -> dict[str, str]:
    """The repair's own events (the pre-drain warning to the workload has its own words and tests)."""
    return {a.reason: a.message for a in d.actions if isinstance(a, Emit) and a.reason != n.EVENT_DRAIN_WARNING}


def whole_sentences(msg: str) -> bool:
    return msg[:1].isupper() and msg.endswith(".") and ".." not in msg and " ." not in msg


def propose_flow(names: n.Names, action: RepairAction) -> dict[str, str]:
    """Every event of a propose repair that is approved by label and succeeds."""
    p = replace(P, approval_label=names.maintenance_approved)
    out: dict[str, str] = {}
    d = transition(None, obs(ConsentMode.PROPOSE, action=action), T0, p, record_name="n1-abc")
    out |= emitted(d)
    d = transition(d.state, obs(ConsentMode.PROPOSE, action=action, node=node(approved=True)), T0, p,
                   record_name="n1-abc")
    out |= emitted(d)
    assert d.state is not None and d.state.phase == Phase.ACTING
    done = ProviderView(ProviderState.SUCCEEDED, new_node="n9")
    d = transition(d.state, obs(ConsentMode.PROPOSE, action=action, provider=done), T0 + timedelta(seconds=5), p)
    if action == RepairAction.RESET:
        d = transition(d.state, obs(ConsentMode.PROPOSE, action=action, fault=None, node=node(boot_id="boot-2")),
                       T0 + timedelta(seconds=9), p)
    else:
        d = transition(d.state, obs(ConsentMode.PROPOSE, action=action, replacement_ready=True),
                       T0 + timedelta(seconds=9), p)
    assert d.state is not None and d.state.phase == Phase.SUCCEEDED, d.state
    return out | emitted(d)


@pytest.mark.parametrize("names", BRANDS, ids=lambda x: x.domain)
def test_a_reset_under_propose_tells_the_user_what_happens_and_what_to_do(names: n.Names) -> None:
    m = propose_flow(names, RepairAction.RESET)
    assert list(m) == [n.EVENT_REQUIRED, n.EVENT_AWAITING_APPROVAL, n.EVENT_APPROVED, n.EVENT_STARTED,
                       n.EVENT_SUCCEEDED]
    assert all(whole_sentences(msg) for r, msg in m.items() if r != n.EVENT_AWAITING_APPROVAL), m
    # the fault as the condition words it, once, with its own full stop
    assert "GPU 3 reported Xid 79 (GPU has fallen off the bus). " in m[n.EVENT_REQUIRED]
    assert "consent mode propose" in m[n.EVENT_REQUIRED] and "approval" in m[n.EVENT_REQUIRED]
    label = f"{names.domain}/maintenance-approved=true"
    assert f"add the label {label} to this node" in m[n.EVENT_AWAITING_APPROVAL]
    assert m[n.EVENT_AWAITING_APPROVAL].endswith(f"kubectl label node n1 {label}")
    assert m[n.EVENT_AWAITING_APPROVAL].startswith("A VM reset is proposed.")
    other = "autoclusters.io" if names.domain != "autoclusters.io" else "crusoe.ai"
    assert other not in "".join(m.values())
    assert m[n.EVENT_APPROVED].startswith("VM reset approved") and label in m[n.EVENT_APPROVED]
    assert m[n.EVENT_STARTED].startswith("VM reset started:") and "300s" in m[n.EVENT_STARTED]
    assert m[n.EVENT_SUCCEEDED].startswith("VM reset succeeded:")


@pytest.mark.parametrize("names", BRANDS, ids=lambda x: x.domain)
def test_a_replacement_names_itself_and_the_new_node(names: n.Names) -> None:
    m = propose_flow(names, RepairAction.REPLACE)
    assert m[n.EVENT_AWAITING_APPROVAL].startswith("A node replacement is proposed.")
    assert m[n.EVENT_STARTED].startswith("Node replacement started:") and "600s" in m[n.EVENT_STARTED]
    assert m[n.EVENT_SUCCEEDED] == "Node replacement succeeded: n9 took this node's place and is Ready in pool pool-a."


def test_auto_says_it_will_not_wait_and_when_it_starts() -> None:
    d = transition(None, obs(ConsentMode.AUTO), T0, P, record_name="n1-abc")
    m = emitted(d)
    assert "consent mode auto: it is repaired without waiting for approval." in m[n.EVENT_REQUIRED]
    assert m[n.EVENT_SCHEDULED] == "VM reset scheduled to start at 2026-03-01T12:00:00Z."
    assert all(whole_sentences(msg) for msg in m.values()), m


def test_switching_the_pool_to_auto_is_named_as_the_approval() -> None:
    d = transition(None, obs(ConsentMode.PROPOSE), T0, P, record_name="n1-abc")
    d = transition(d.state, obs(ConsentMode.AUTO), T0, P)
    assert emitted(d)[n.EVENT_APPROVED] == "VM reset approved: the pool's consent mode changed to auto."


def test_a_direct_replacement_says_why() -> None:
    from autoclusters.controller.statemachine import HistoryView

    hist = HistoryView(last_reset_at=T0 - timedelta(hours=2), last_reset_fault=Fault("gpu", "48", n.REASON_XID, ""),
                       last_reset_record="n1-old")
    d = transition(None, obs(ConsentMode.PROPOSE, history=hist), T0, P, record_name="n1-abc")
    msg = emitted(d)[n.EVENT_AWAITING_APPROVAL]
    assert msg.startswith("A node replacement is proposed. The node was reset 7200s ago for a gpu fault, "
                          "so it is replaced directly. To approve it")


@pytest.mark.parametrize(("message", "expected"), [
    ("GPU 3 reported Xid 79 (GPU has fallen off the bus).", "GPU 3 reported Xid 79 (GPU has fallen off the bus)."),
    ("NVSwitch reported SXID 24007", "NVSwitch reported SXID 24007."),
    ("", "The node reports NvidiaXIDError."),
])
def test_the_fault_is_one_sentence(message: str, expected: str) -> None:
    assert words.fault_sentence(Fault("gpu", "x", n.REASON_XID, message)) == expected


def test_the_policy_default_label_is_the_default_brand() -> None:
    assert RepairPolicy().approval_label == n.Names().maintenance_approved
