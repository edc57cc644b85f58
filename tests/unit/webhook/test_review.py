from __future__ import annotations

import pytest

from autoclusters.webhook import review


def _body(uid: str = "u-1") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": uid}}


def test_parse_accepts_v1_review() -> None:
    assert review.parse(_body())["uid"] == "u-1"


@pytest.mark.parametrize("body", [
    [], {"kind": "Node"},
    {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
])
def test_parse_rejects_what_is_not_a_v1_review(body: object) -> None:
    with pytest.raises(review.BadReview):
        review.parse(body)


def test_undefined_result_is_a_denial() -> None:
    d = review.from_opa("u-1", {"decision_id": "d-1"})
    assert not d.allowed and d.outcome == "undefined" and "undefined" in d.message
    assert d.decision_id == "d-1"


@pytest.mark.parametrize("result", [
    None, "yes", {"allowed": True}, {"uid": "other", "allowed": True}, {"uid": "u-1", "allowed": "true"},
])
def test_malformed_or_foreign_result_is_a_denial(result: object) -> None:
    assert not review.from_opa("u-1", {"result": result}).allowed


def test_allowed_result() -> None:
    d = review.from_opa("u-1", {"result": {"uid": "u-1", "allowed": True, "violations": []}})
    assert d.allowed and d.message == ""


def test_allowed_true_with_violations_is_still_denied() -> None:
    d = review.from_opa("u-1", {"result": {"uid": "u-1", "allowed": True,
                                           "violations": [{"rule": "r", "msg": "m"}]}})
    assert not d.allowed


def test_denial_message_names_every_rule() -> None:
    d = review.from_opa("u-1", {"result": {"uid": "u-1", "allowed": False, "violations": [
        {"rule": "maintenance-approved-value", "msg": "only true"},
        {"rule": "maintenance-approved-requires-fault", "msg": "the node no longer needs a repair"}]}})
    assert d.message == ("[maintenance-approved-value] only true; "
                         "[maintenance-approved-requires-fault] the node no longer needs a repair")


def test_response_shapes() -> None:
    deny = review.response("u-1", review.Decision(False, (review.Violation("r", "m"),), decision_id="d-9",
                                                  outcome="denied"))
    assert deny["apiVersion"] == "admission.k8s.io/v1" and deny["kind"] == "AdmissionReview"
    assert deny["response"]["status"] == {"code": 403, "reason": "Forbidden", "message": "[r] m"}
    assert deny["response"]["auditAnnotations"] == {"opa-decision-id": "d-9"}
    err = review.response("u-2", review.unavailable("timeout"))
    assert err["response"]["allowed"] is False and err["response"]["status"]["code"] == 500
    ok = review.response("u-3", review.Decision(True))
    assert ok["response"] == {"uid": "u-3", "allowed": True}
