"""The words of the repair events: what a user reads in ``kubectl describe node``.

Each message is whole sentences, says which repair (a VM reset or a node replacement) and,
where the user has something to do, exactly what: the approval message names the label and
value to add, with the installation's domain, and the command that adds it. Pure functions
of the repair's facts, so the state machine stays free of wording and the tests check every
message under any brand.
"""

from __future__ import annotations

from typing import Protocol

from autoclusters.api import ConsentMode
from autoclusters.providers.actions import ACTIONS


class FaultLike(Protocol):
    @property
    def reason(self) -> str: ...

    @property
    def message(self) -> str: ...


def action_name(action: str) -> str:
    """``VM reset`` / ``node replacement``: the action table's noun."""
    return ACTIONS[action].noun if action in ACTIONS else str(action)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def sentence(text: str) -> str:
    """``text`` ending with one full stop (or the mark it already ends with)."""
    text = text.strip()
    return text if not text or text[-1] in ".!?" else f"{text}."


def fault_sentence(fault: FaultLike) -> str:
    """The fault as the node's condition words it (``GPU 3 reported Xid 79 (…).``)."""
    return sentence(fault.message) if fault.message.strip() else f"The node reports {fault.reason}."


def required(fault: FaultLike, pool: str, mode: str) -> str:
    what = ("it is repaired without waiting for approval" if mode == ConsentMode.AUTO
            else "the repair waits for your approval")
    return f"Repair needed: {fault_sentence(fault)} Pool {pool} has consent mode {mode}: {what}."


def awaiting_approval(action: str, node: str, approval_label: str, why: str = "") -> str:
    return (f"A {action_name(action)} is proposed.{_why(why)} To approve it, add the label "
            f"{approval_label}=true to this node: kubectl label node {node} {approval_label}=true")


def approved(action: str, approval_label: str, *, by_label: bool, why: str = "") -> str:
    how = (f"the label {approval_label}=true is on the node" if by_label
           else f"the pool's consent mode changed to {ConsentMode.AUTO}")
    return f"{_cap(action_name(action))} approved: {how}.{_why(why)}"


def scheduled(action: str, start: str, why: str = "") -> str:
    return f"{_cap(action_name(action))} scheduled to start at {start}.{_why(why)}"


def started(action: str, drain_seconds: float, *, after_failed: str = "") -> str:
    """``after_failed``: the action whose failure this one follows ("" for a first start)."""
    lead = f"The {action_name(after_failed)} did not fix the node; {action_name(action)} started" if after_failed \
        else f"{_cap(action_name(action))} started"
    return (f"{lead}: the node is cordoned and its pods are evicted "
            f"(any still running after {int(drain_seconds)}s are deleted).")


def stray_approval_removed(approval_label: str, value: str, required_label: str) -> str:
    """On the node, when the controller removes an approval that no pending repair backs."""
    return (f"Removed the label {approval_label}={value}: no repair is pending on this node ({required_label} "
            f"is not on it), so it approved nothing. An approval counts only while {required_label} is on the "
            "node; approve again once a repair is proposed.")


def drain_warning(action: str, deadline: str, wait_seconds: float, reason: str) -> str:
    """On the node, when the warning goes out."""
    return (f"Before the {action_name(action)}, this node's workloads are warned: its pods are evicted at "
            f"{deadline} at the latest ({int(wait_seconds)}s). Reason: {reason}.")


def pod_drain_warning(node: str, action: str, deadline: str, reason: str, wait_label: str, ack_key: str,
                      record: str) -> str:
    """On each pod of the node: what is coming, and how to answer it."""
    return (f"Node {node} is drained for a {action_name(action)}: this pod is evicted at {deadline} at the "
            f"latest (SIGTERM, then its grace period). Reason: {reason}. Save your state now. A pod labelled "
            f"{wait_label}=true is waited for until it is annotated {ack_key}={record}.")


def drain_waiting(deadline: str, pending: list[str]) -> str:
    """The record's message while the pre-drain wait lasts."""
    return f"Waiting until {deadline} at the latest for an acknowledgement from {', '.join(pending)}."


def drain_wait_acknowledged(who: list[str]) -> str:
    return f"Every acknowledgement the drain waited for arrived ({', '.join(who)}): evicting the pods now."


def drain_wait_deadline(pending: list[str]) -> str:
    return (f"The pre-drain wait reached its deadline without an acknowledgement from {', '.join(pending)}: "
            "evicting the pods now.")


def hook_failed(error: str) -> str:
    return f"The pool's pre-drain hook failed ({error}). The drain goes on as planned."


def succeeded_in_place(action: str, fault_class: str, *, rebooted: bool) -> str:
    """The node stayed (a reset of some kind) and was proved repaired."""
    how = "the node rebooted, is Ready" if rebooted else "the node is Ready"
    return f"{_cap(action_name(action))} succeeded: {how} and reports no {fault_class} fault."


def replace_succeeded(new_node: str, pool: str) -> str:
    return f"Node replacement succeeded: {new_node} took this node's place and is Ready in pool {pool}."


def action_failed(action: str, why: str) -> str:
    """MaintenanceActionFailed for an action that escalates: what failed and where to look (the provider's words)."""
    return f"{_cap(action_name(action))} failed: {sentence(why)}"


def escalated_after_failure(action: str, escalation: str, why: str) -> str:
    return (f"The {action_name(action)} failed ({why.rstrip('.')}); {action_name(escalation)} follows under the "
            "same approval.")


def _why(why: str) -> str:
    return f" {sentence(why)}" if why.strip() else ""


def record_unreadable(record: str, why: str) -> str:
    return (f"The repair record {record} cannot be read by this controller ({sentence(why)[:-1]}), so this node's "
            f"repairs are held and the record is left as it is. Fix it, or delete it to let the controller "
            f"start over: kubectl delete remediation {record}")
