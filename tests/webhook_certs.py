"""A CA and a serving certificate for 127.0.0.1, for the webhook servers the tests start."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def write_certs(cert_dir: Path) -> bytes:
    """A CA and a serving cert for IP 127.0.0.1 (``tls.crt``/``tls.key``, the file names
    controller-runtime's webhook server reads); returns the CA's PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject, issuer, public_key, signing_key, ca: bool):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            ).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return b.sign(signing_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = build("jobset-test-ca", "jobset-test-ca", ca_key.public_key(), ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = build("127.0.0.1", "jobset-test-ca", key.public_key(), ca_key, ca=False)
    cert_dir.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    (cert_dir / "tls.crt").write_bytes(leaf.public_bytes(pem))
    (cert_dir / "tls.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (cert_dir / "ca.crt").write_bytes(ca.public_bytes(pem))
    return ca.public_bytes(pem)
