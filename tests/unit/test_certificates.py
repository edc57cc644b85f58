"""The one certificate builder: what it signs, for whom, and for how long."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from autoclusters.certificates import CLIENT_AUTH, make_ca, make_leaf, make_serving, name

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def test_a_serving_certificate_is_signed_by_its_ca_for_its_hosts() -> None:
    ca = make_ca("test-ca", NOW, dt.timedelta(days=10))
    serving = make_serving(ca, ["svc.ns.svc", "127.0.0.1"], NOW, dt.timedelta(days=2))
    cert = serving.cert
    cert.verify_directly_issued_by(ca.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH])
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    assert cert.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert not serving.due(NOW, 1 / 3) and serving.due(NOW + dt.timedelta(days=2), 1 / 3)


def test_a_leaf_never_outlives_its_ca_and_carries_its_group() -> None:
    ca = make_ca("test-ca", NOW, dt.timedelta(days=1))
    client = make_leaf(ca, name("admin", "system:masters"), NOW, dt.timedelta(days=365), usage=CLIENT_AUTH)
    assert client.cert.not_valid_after_utc == ca.cert.not_valid_after_utc
    assert client.cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    with pytest.raises(x509.ExtensionNotFound):
        client.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
