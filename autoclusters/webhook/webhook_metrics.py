"""The webhook's Prometheus metrics, in a registry of its own (tests and benchmarks can
run several servers in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoclusters.webhook.review import OUTCOMES

BAD_REQUEST = "bad_request"  # a request that is no AdmissionReview (the server's own outcome)


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reviews = Counter("autoclusters_webhook_reviews_total", "AdmissionReviews answered, by outcome",
                               ["outcome"], registry=self.registry)
        for outcome in (*OUTCOMES, BAD_REQUEST):  # exported from the start at 0 (rate() needs a start)
            self.reviews.labels(outcome)
        # Reviews OPA gave no answer to within --opa-timeout (also counted as outcome "error").
        self.opa_timeouts = Counter("autoclusters_webhook_opa_timeouts_total",
                                    "OPA queries that got no answer within the webhook's time-out (denied)",
                                    registry=self.registry)
        self.violations = Counter("autoclusters_webhook_violations_total", "Rule violations found, by rule",
                                  ["rule"], registry=self.registry)
        self.latency = Histogram("autoclusters_webhook_review_seconds", "Time to answer one AdmissionReview",
                                 buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5),
                                 registry=self.registry)
        # The alert on an expiring certificate (deploy/alerts.py) reads this: what is served, not
        # what some Secret holds.
        self.certificate_expiry = Gauge("autoclusters_webhook_certificate_expiry_timestamp_seconds",
                                        "When the serving certificate loaded now expires (notAfter, Unix time)",
                                        registry=self.registry)
