from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509

from autoclusters.clock import FakeClock
from autoclusters.webhook.certs import CertManager, CertPolicy, CertStore

POLICY = CertPolicy(ca_lifetime=dt.timedelta(days=90), serving_lifetime=dt.timedelta(days=9), renew_fraction=1 / 3)


def _manager(tmp_path: Path, clock: FakeClock, hosts: tuple[str, ...] = ("127.0.0.1", "webhook.svc")) -> CertManager:
    return CertManager(CertStore(tmp_path), list(hosts), clock, POLICY)


def _serving(tmp_path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())


def test_first_start_generates_a_ca_and_a_serving_cert_for_ips_and_names(tmp_path: Path) -> None:
    m = _manager(tmp_path, FakeClock())
    assert m.ensure() is True
    cert = _serving(tmp_path)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["webhook.svc"]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(m.ca_bundle()))
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600


def test_restart_reuses_valid_certificates(tmp_path: Path) -> None:
    clock = FakeClock()
    _manager(tmp_path, clock).ensure()
    before = (tmp_path / "tls.crt").read_bytes()
    assert _manager(tmp_path, clock).ensure() is False
    assert (tmp_path / "tls.crt").read_bytes() == before


def test_serving_cert_renewed_before_expiry_without_touching_the_bundle(tmp_path: Path) -> None:
    clock = FakeClock()
    m = _manager(tmp_path, clock)
    m.ensure()
    bundle, first = m.ca_bundle(), _serving(tmp_path)
    clock.advance(dt.timedelta(days=5).total_seconds())
    assert m.ensure() is False
    assert _serving(tmp_path).serial_number == first.serial_number
    clock.advance(dt.timedelta(days=1).total_seconds())  # 3 of 9 days left: due
    assert m.ensure() is False
    renewed = _serving(tmp_path)
    assert renewed.serial_number != first.serial_number
    assert renewed.not_valid_after_utc > first.not_valid_after_utc
    assert m.ca_bundle() == bundle


def test_ca_renewal_keeps_the_old_ca_in_the_bundle_until_it_expires(tmp_path: Path) -> None:
    clock = FakeClock()
    m = _manager(tmp_path, clock)
    m.ensure()
    old_ca = (tmp_path / "ca.crt").read_bytes()
    clock.advance(dt.timedelta(days=61).total_seconds())
    assert m.ensure() is True
    new_ca = (tmp_path / "ca.crt").read_bytes()
    assert new_ca != old_ca
    assert m.ca_bundle() == new_ca + old_ca
    _serving(tmp_path).verify_directly_issued_by(x509.load_pem_x509_certificate(new_ca))
    clock.advance(dt.timedelta(days=30).total_seconds())  # the old CA has expired
    assert m.ensure() is True
    assert m.ca_bundle() == new_ca


def test_new_hosts_trigger_a_new_serving_cert(tmp_path: Path) -> None:
    clock = FakeClock()
    _manager(tmp_path, clock).ensure()
    first = _serving(tmp_path).serial_number
    _manager(tmp_path, clock, ("127.0.0.1", "webhook.svc", "10.0.0.7")).ensure()
    assert _serving(tmp_path).serial_number != first


def _pair(now: dt.datetime, days: int = 9) -> tuple[bytes, bytes]:
    from autoclusters import certificates

    ca = certificates.make_ca("test-ca", now, dt.timedelta(days=90))
    leaf = certificates.make_serving(ca, ["webhook.svc"], now, dt.timedelta(days=days))
    return leaf.cert_pem, leaf.key_pem


def test_a_mounted_secret_is_reloaded_when_the_kubelet_swaps_it(tmp_path: Path) -> None:
    from autoclusters.webhook.certs import FileCertReloader
    from tests.secret_volume import write_secret_volume

    now = dt.datetime.now(dt.UTC)
    first, second = _pair(now, 9), _pair(now, 20)
    write_secret_volume(tmp_path, {"tls.crt": first[0], "tls.key": first[1]})
    r = FileCertReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
    r.ensure()
    assert r.not_after == x509.load_pem_x509_certificate(first[0]).not_valid_after_utc
    write_secret_volume(tmp_path, {"tls.crt": second[0], "tls.key": second[1]})
    r.ensure()
    assert r.not_after == x509.load_pem_x509_certificate(second[0]).not_valid_after_utc


def test_a_certificate_with_another_ones_key_is_never_loaded(tmp_path: Path) -> None:
    """A read between the two files of an update (or a broken Secret): the loaded pair stays."""
    import pytest

    from autoclusters.webhook.certs import FileCertReloader

    now = dt.datetime.now(dt.UTC)
    good, other = _pair(now, 9), _pair(now, 20)
    (tmp_path / "tls.crt").write_bytes(good[0])
    (tmp_path / "tls.key").write_bytes(good[1])
    r = FileCertReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
    r.ensure()
    (tmp_path / "tls.crt").write_bytes(other[0])
    with pytest.raises(RuntimeError, match="do not hold a matching certificate and key"):
        r.ensure()
    assert r.not_after == x509.load_pem_x509_certificate(good[0]).not_valid_after_utc
    (tmp_path / "tls.key").write_bytes(other[1])
    r.ensure()
    assert r.not_after == x509.load_pem_x509_certificate(other[0]).not_valid_after_utc


def test_a_leaf_verifies_against_a_bundle_of_two_cas_of_one_name(tmp_path: Path) -> None:
    """A CA and the one it replaced share their name: the leaf's authority key id makes
    OpenSSL pick the right one (without it, a handshake fails with a signature failure)."""
    import socket
    import ssl
    import threading

    from autoclusters import certificates

    now = dt.datetime.now(dt.UTC)
    old, new = (certificates.make_ca("autoclusters-webhook-ca", now, dt.timedelta(days=1)) for _ in range(2))
    leaf = certificates.make_serving(new, ["127.0.0.1"], now, dt.timedelta(hours=1))
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True):
                pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        client = ssl.create_default_context(cadata=(old.cert_pem + new.cert_pem).decode())
        with socket.create_connection(("127.0.0.1", port), 2) as raw, \
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.getpeercert() is not None
        t.join(5)
