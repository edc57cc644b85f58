"""AdmissionReview v1 in and out, with no I/O: what to ask OPA and how to answer.

A decision is only an allow when OPA returned a well-formed ``{"allowed": true}`` for this
request's uid; anything else (undefined, malformed, another uid) is a denial, so a broken
policy bundle can never let a request through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REVIEW_API = "admission.k8s.io/v1"


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request."""


@dataclass(frozen=True)
class Violation:
    rule: str
    msg: str


# A decision's outcome, a metrics label (``autoclusters_webhook_reviews_total{outcome}``).
OUTCOMES = ("allowed", "denied", "undefined", "error")


@dataclass(frozen=True)
class AdmissionDecision:
    allowed: bool
    violations: tuple[Violation, ...] = ()
    reason: str = ""
    decision_id: str | None = None
    outcome: str = "allowed"  # one of OUTCOMES
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        if self.allowed:
            return ""
        if self.violations:
            return "; ".join(f"[{v.rule}] {v.msg}" for v in self.violations)
        return self.reason


def parse(body: Any) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview, checked enough to answer it."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
        raise BadReview("expected an AdmissionReview")
    if body.get("apiVersion") != REVIEW_API:
        raise BadReview(f"unsupported AdmissionReview version {body.get('apiVersion')!r}; expected {REVIEW_API}")
    request = body.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise BadReview("AdmissionReview without request.uid")
    return request


def opa_input(request: dict[str, Any]) -> dict[str, Any]:
    """The part of the review the policy reads. A real Node carries tens of kilobytes of
    status (images, conditions, addresses) that no rule looks at; sending only metadata
    keeps OPA's input parsing off the latency budget. Pool objects are small and are
    checked whole."""
    trimmed: dict[str, Any] = {k: request[k] for k in ("uid", "kind", "resource", "subResource", "name",
                                                       "operation", "userInfo", "dryRun") if k in request}
    whole = (request.get("kind") or {}).get("kind") != "Node"
    for key in ("object", "oldObject"):
        obj = request.get(key)
        if whole or not isinstance(obj, dict):
            trimmed[key] = obj
            continue
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        trimmed[key] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                        "metadata": {"name": meta.get("name"), "labels": meta.get("labels")}}
    return {"request": trimmed}


def from_opa(uid: str, reply: dict[str, Any]) -> AdmissionDecision:
    """Reads OPA's Data API reply for ``data.autoclusters.admission.decision``."""
    decision_id = reply.get("decision_id")
    if "result" not in reply:
        return AdmissionDecision(False, reason="policy decision undefined: the autoclusters admission policy is not "
                                 "loaded or does not apply to this request (denied)",
                                 decision_id=decision_id, outcome="undefined")
    result = reply["result"]
    if not isinstance(result, dict) or result.get("uid") != uid or not isinstance(result.get("allowed"), bool):
        return AdmissionDecision(False, reason="malformed policy decision (denied)", decision_id=decision_id,
                                 outcome="undefined")
    violations = tuple(Violation(str(v.get("rule", "unknown")), str(v.get("msg", "")))
                       for v in result.get("violations") or [] if isinstance(v, dict))
    if result["allowed"] and not violations:
        return AdmissionDecision(True, decision_id=decision_id)
    if not violations:
        return AdmissionDecision(False, reason="denied by policy", decision_id=decision_id, outcome="denied")
    return AdmissionDecision(False, violations, decision_id=decision_id, outcome="denied")


def unavailable(error: str) -> AdmissionDecision:
    return AdmissionDecision(False, reason=f"the policy engine could not decide ({error}); denied until it is back",
                             outcome="error")


def timed_out(seconds: float) -> AdmissionDecision:
    """OPA took the query and gave no answer within the webhook's own time-out (a hung or
    overloaded policy engine): an error, denied, said in words a person at kubectl reads."""
    return AdmissionDecision(
        False, reason=f"the policy engine did not answer in time (no decision within {seconds:g}s); "
                      "denied until it answers", outcome="error", extra={"timed_out": True})


def response(uid: str, decision: AdmissionDecision) -> dict[str, Any]:
    """The AdmissionReview the API server expects back."""
    resp: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        code = 500 if decision.outcome == "error" else 403
        resp["status"] = {"code": code, "reason": "Forbidden" if code == 403 else "InternalError",
                          "message": decision.message}
    if decision.decision_id:
        resp["auditAnnotations"] = {"opa-decision-id": decision.decision_id}
    return {"apiVersion": REVIEW_API, "kind": "AdmissionReview", "response": resp}
