from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from autoclusters.devcluster.pki import Pki


def test_pki_issues_certs_signed_by_its_ca(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.create({"admin": ("kubernetes-admin", "system:masters"), "kcm": ("system:kube-controller-manager", None)})
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.client_cert("admin")[0].read_bytes())
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    for cert in (serving, admin):
        assert cert.issuer == ca.subject
        assert cert.signature_hash_algorithm is not None
        ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert oct(pki.ca_key.stat().st_mode)[-3:] == "600"
    assert pki.sa_pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
