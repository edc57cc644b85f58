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
    deny = review.response("u-1", review.AdmissionDecision(False, (review.Violation("r", "m"),), decision_id="d-9",
                                                  outcome="denied"))
    assert deny["apiVersion"] == "admission.k8s.io/v1" and deny["kind"] == "AdmissionReview"
    assert deny["response"]["status"] == {"code": 403, "reason": "Forbidden", "message": "[r] m"}
    assert deny["response"]["auditAnnotations"] == {"opa-decision-id": "d-9"}
    err = review.response("u-2", review.unavailable("timeout"))
    assert err["response"]["allowed"] is False and err["response"]["status"]["code"] == 500
    ok = review.response("u-3", review.AdmissionDecision(True))
    assert ok["response"] == {"uid": "u-3", "allowed": True}


def test_opa_input_keeps_what_the_rules_read_and_drops_node_status() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "b"}, "uid": "x",
                                                             "managedFields": [{"big": "x" * 1000}]},
            "status": {"images": [{"names": ["img"] * 50}] * 50}}
    req = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Node"}, "operation": "UPDATE",
           "userInfo": {"username": "alice", "groups": ["g"]}, "object": node, "oldObject": node}
    out = review.opa_input(req)["request"]
    assert out["object"] == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "b"}}}
    assert out["userInfo"]["username"] == "alice" and out["operation"] == "UPDATE" and out["uid"] == "u"
    create = review.opa_input({**req, "operation": "CREATE", "oldObject": None})["request"]
    assert create["oldObject"] is None


def test_opa_input_keeps_pool_objects_whole() -> None:
    pool = {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool", "metadata": {"name": "p"},
            "spec": {"consentMode": "auto"}}
    req = {"uid": "u", "kind": {"kind": "GpuNodePool"}, "operation": "CREATE", "object": pool}
    assert review.opa_input(req)["request"]["object"] == pool
