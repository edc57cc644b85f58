from autoclusters.kube import Forbidden, Invalid
from autoclusters.ops.approval import ApprovalStatus, approval_patch, approval_state, is_cleared_rejection
from tests.unit.builders import NAMES, node


def test_only_a_node_that_carries_the_required_label_is_due() -> None:
    assert approval_state(node("n", required=True), NAMES) is None
    assert approval_state(node("n"), NAMES) == ApprovalStatus.NOT_NEEDED
    assert approval_state(node("n", required=True, approved=True), NAMES) == ApprovalStatus.ALREADY_APPROVED


def test_required_label_must_be_true() -> None:
    n = node("n", labels={NAMES.maintenance_required: "false"})
    assert approval_state(n, NAMES) == ApprovalStatus.NOT_NEEDED


def test_patch_names_only_the_approval_label_and_the_version_judged() -> None:
    assert approval_patch(NAMES, "42") == {"metadata": {"resourceVersion": "42",
                                                        "labels": {"autoclusters.io/maintenance-approved": "true"}}}


def test_cleared_rejection_from_webhook_or_policy_is_recognised() -> None:
    webhook = Forbidden('admission webhook "labels.autoclusters.io" denied the request: the node no longer needs '
                        "a repair: autoclusters.io/maintenance-required is not present", status=403)
    cel = Invalid("ValidatingAdmissionPolicy 'x' denied request: The node no longer needs a repair", status=422)
    other = Forbidden("nodes \"n\" is forbidden: User cannot patch resource", status=403)
    assert is_cleared_rejection(webhook) and is_cleared_rejection(cel)
    assert not is_cleared_rejection(other)


def test_done_statuses() -> None:
    done = {s for s in ApprovalStatus if s.done}
    assert done == {ApprovalStatus.APPROVED, ApprovalStatus.ALREADY_APPROVED, ApprovalStatus.NOT_NEEDED,
                    ApprovalStatus.WOULD_APPROVE}
