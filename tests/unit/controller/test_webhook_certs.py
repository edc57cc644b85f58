"""The controller's keeping of the webhook's serving certificate: what is renewed when, that the
bundle always trusts what is served, and the order of the writes (controller/webhook_certs.py)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from autoclusters import certificates
from autoclusters.clock import FakeClock
from autoclusters.controller.webhook_certs import (
    CA_CERT,
    RETIRED,
    TLS_BUNDLE,
    TLS_CERT,
    TLS_KEY,
    Plan,
    WebhookCertKeeper,
    plan,
)
from autoclusters.deploy.admission import webhook_configuration
from autoclusters.names import Names
from autoclusters.webhook.certs import CertPolicy
from tests.unit.fakeapi import FakeApi

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
POLICY = CertPolicy(ca_lifetime=dt.timedelta(days=90), serving_lifetime=dt.timedelta(days=9), renew_fraction=1 / 3)
HOSTS = ["autoclusters-webhook.ns.svc", "autoclusters-webhook.ns.svc.cluster.local"]


def _bundle(p: Plan) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(p.bundle)


def _trusted(p: Plan) -> bool:
    """The served certificate was signed by a CA of the bundle."""
    return any(certificates.issued_by(p.serving, ca) for ca in _bundle(p))


def test_a_first_plan_makes_a_ca_and_a_serving_certificate_for_the_hosts() -> None:
    p = plan(None, None, HOSTS, T0, POLICY)
    ca = x509.load_pem_x509_certificate(p.ca[CA_CERT])
    assert _bundle(p) == [ca] and p.tls[TLS_BUNDLE] == p.bundle
    p.serving.verify_directly_issued_by(ca)
    san = p.serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == HOSTS
    assert p.serving.not_valid_after_utc == T0 + POLICY.serving_lifetime


def test_nothing_changes_while_nothing_is_due() -> None:
    p = plan(None, None, HOSTS, T0, POLICY)
    assert plan(p.ca, p.tls, HOSTS, T0 + dt.timedelta(days=5), POLICY) == p


def test_the_serving_certificate_is_renewed_with_a_third_of_its_life_left_under_the_same_ca() -> None:
    p = plan(None, None, HOSTS, T0, POLICY)
    later = T0 + dt.timedelta(days=6, minutes=1)  # 9 days, renewed with 3 left
    q = plan(p.ca, p.tls, HOSTS, later, POLICY)
    assert q.ca == p.ca and q.bundle == p.bundle
    assert q.tls[TLS_CERT] != p.tls[TLS_CERT] and q.tls[TLS_KEY] != p.tls[TLS_KEY]
    assert q.serving.not_valid_after_utc == later + POLICY.serving_lifetime
    assert _trusted(q)


def test_a_renewed_ca_keeps_the_old_one_in_the_bundle_until_it_expires() -> None:
    p = plan(None, None, HOSTS, T0, POLICY)
    old_ca = x509.load_pem_x509_certificate(p.ca[CA_CERT])
    t = T0
    while t < T0 + dt.timedelta(days=61):  # keep it running every day, as the leader does
        t += dt.timedelta(days=1)
        p = plan(p.ca, p.tls, HOSTS, t, POLICY)
        assert _trusted(p), t
    new_ca = x509.load_pem_x509_certificate(p.ca[CA_CERT])
    assert new_ca != old_ca and _bundle(p) == [new_ca, old_ca]
    p.serving.verify_directly_issued_by(new_ca)
    p = plan(p.ca, p.tls, HOSTS, old_ca.not_valid_after_utc + dt.timedelta(seconds=1), POLICY)
    assert _bundle(p) == [new_ca] and p.ca[RETIRED] == b""


def test_a_certificate_someone_else_issued_is_replaced_and_its_ca_trusted_until_it_expires() -> None:
    """The Pulumi stack's first certificate: its CA's key was never kept."""
    seed_ca = certificates.make_ca("seed", T0, dt.timedelta(days=825))
    seed = certificates.make_serving(seed_ca, HOSTS, T0, dt.timedelta(days=825))
    p = plan(None, {TLS_CERT: seed.cert_pem, TLS_KEY: seed.key_pem, TLS_BUNDLE: seed_ca.cert_pem}, HOSTS, T0, POLICY)
    own = x509.load_pem_x509_certificate(p.ca[CA_CERT])
    assert _bundle(p) == [own, seed_ca.cert]
    p.serving.verify_directly_issued_by(own)
    assert plan(p.ca, p.tls, HOSTS, T0 + dt.timedelta(days=1), POLICY) == p


def test_a_certificate_for_other_hosts_is_reissued() -> None:
    p = plan(None, None, HOSTS[:1], T0, POLICY)
    q = plan(p.ca, p.tls, HOSTS, T0, POLICY)
    assert q.ca == p.ca and q.tls[TLS_CERT] != p.tls[TLS_CERT]


def test_damaged_secrets_are_replaced() -> None:
    p = plan({CA_CERT: b"not a pem", "ca.key": b"x"}, {TLS_CERT: b"?", TLS_KEY: b"?"}, HOSTS, T0, POLICY)
    assert _trusted(p)


SECRETS = "/api/v1/namespaces/ns/secrets"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def _keeper(api: FakeApi, clock: FakeClock) -> WebhookCertKeeper:
    return WebhookCertKeeper(api.kube(), clock, namespace="ns", tls_secret="tls", ca_secret="ca", config_name="cfg",
                             hosts=HOSTS, policy=POLICY)


def _data(api: FakeApi, name: str) -> dict[str, bytes]:
    obj = api.read(f"{SECRETS}/{name}")
    assert obj is not None
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def test_the_keeper_writes_the_ca_then_the_bundle_then_the_serving_certificate() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    api.put(CONFIGS, webhook_configuration(Names(), ca_bundle=b"", name="cfg"))
    p = _keeper(api, clock).sync()
    writes = [(r.verb, r.resource, r.body["metadata"]["name"] if r.verb == "POST" else r.path.rsplit("/", 1)[-1])
              for r in api.requests if r.verb in ("POST", "PATCH", "PUT")]
    assert writes == [("POST", "secrets", "ca"), ("PATCH", "validatingwebhookconfigurations", "cfg"),
                      ("POST", "secrets", "tls")]
    cfg = api.read(f"{CONFIGS}/cfg")
    assert cfg is not None
    assert {w["clientConfig"]["caBundle"] for w in cfg["webhooks"]} == {base64.b64encode(p.bundle).decode()}
    assert _data(api, "tls") == p.tls and _data(api, "ca") == p.ca
    tls = api.read(f"{SECRETS}/tls")
    assert tls is not None and tls["type"] == "kubernetes.io/tls"


def test_the_keeper_writes_nothing_while_nothing_is_due_and_renews_in_place() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    api.put(CONFIGS, webhook_configuration(Names(), ca_bundle=b"", name="cfg"))
    keeper = _keeper(api, clock)
    first = keeper.sync()
    api.requests.clear()
    keeper.sync()
    assert {r.verb for r in api.requests} == {"GET"}
    clock.advance(dt.timedelta(days=7).total_seconds())
    second = keeper.sync()
    assert second.tls[TLS_CERT] != first.tls[TLS_CERT] and second.bundle == first.bundle
    assert _data(api, "tls") == second.tls
    # the bundle the stack re-applied over ours is put right at the next pass
    api.edit(f"{CONFIGS}/cfg", lambda c: c["webhooks"][0]["clientConfig"].update(caBundle=""))
    keeper.sync()
    cfg = api.read(f"{CONFIGS}/cfg")
    assert cfg is not None and cfg["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(
        second.bundle).decode()


def test_the_keeper_needs_a_host() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        WebhookCertKeeper(FakeApi().kube(), FakeClock(T0), namespace="ns", tls_secret="t", ca_secret="c",
                          config_name="cfg", hosts=[], policy=POLICY)


def test_before_the_configuration_exists_a_valid_certificate_is_not_swapped() -> None:
    """The stack creates the webhook configuration last, with the bundle of the certificate it
    issued: swapping that certificate before the configuration exists would leave the API
    server distrusting the webhook until the next pass."""
    api, clock = FakeApi(), FakeClock(T0)
    seed_ca = certificates.make_ca("seed", T0, dt.timedelta(days=825))
    seed = certificates.make_serving(seed_ca, HOSTS, T0, dt.timedelta(days=825))
    api.put(SECRETS, {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "tls"},
                      "data": {k: base64.b64encode(v).decode() for k, v in
                               {TLS_CERT: seed.cert_pem, TLS_KEY: seed.key_pem, TLS_BUNDLE: seed_ca.cert_pem}.items()}})
    keeper = _keeper(api, clock)
    keeper.sync()
    assert _data(api, "tls")[TLS_CERT] == seed.cert_pem
    api.put(CONFIGS, webhook_configuration(Names(), ca_bundle=seed_ca.cert_pem, name="cfg"))
    p = keeper.sync()
    assert _data(api, "tls") == p.tls and p.tls[TLS_CERT] != seed.cert_pem
    cfg = api.read(f"{CONFIGS}/cfg")
    assert cfg is not None and base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"]) == p.bundle
    assert seed_ca.cert in _bundle(p)
    # with no Secret at all, or an expired one, there is nothing to keep: it is written at once
    api2 = FakeApi()
    _keeper(api2, clock).sync()
    assert _data(api2, "tls")[TLS_CERT]


@pytest.mark.parametrize(("secret", "shards", "shard", "keeps"), [
    ("", 1, 0, False),  # the default: someone else's certificate (cert-manager, the local mode)
    ("autoclusters-webhook-tls", 1, 0, True),
    ("autoclusters-webhook-tls", 3, 0, True),
    ("autoclusters-webhook-tls", 3, 1, False),  # one keeper per installation: shard 0's leader
])
def test_the_controller_keeps_the_certificate_only_when_asked_and_only_on_shard_0(
        secret: str, shards: int, shard: int, keeps: bool) -> None:
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.manager import Controller

    c = Controller(FakeApi().kube(), ControllerConfig(metrics_port=0, shards=shards, shard=shard,
                                                      webhook_tls_secret=secret, namespace="ns"))
    assert (c.webhook_certs is not None) is keeps
    if c.webhook_certs is not None:
        assert c.webhook_certs.hosts == ["autoclusters-webhook.ns.svc", "autoclusters-webhook.ns.svc.cluster.local"]
        assert c.webhook_certs.policy == CertPolicy()  # 30 days and a year by default
