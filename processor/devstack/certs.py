"""Throwaway certificates for the secured local stack: a CA, a broker certificate, a client certificate.

Made with the ``cryptography`` package (no openssl command line). Keys are EC P-256 (fast to make,
accepted by OpenSSL in librdkafka and Python's ``ssl``). The broker certificate names every address a
client may dial (``localhost``, ``127.0.0.1``), so hostname verification stays on in every test. The
client key is written encrypted with a password, so the key-password setting is exercised end to end.

Files (PEM) written by :func:`make_dev_pki` into one folder, private keys with mode 0600:
``ca.pem``, ``broker.pem`` + ``broker-key.pem``, ``client.pem`` + ``client-key.pem`` (encrypted),
and a second, unrelated CA ``untrusted-ca.pem`` for "certificate not trusted" tests.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from processor.devstack.pki_files import DevPki

__all__ = ["DevPki", "make_dev_pki"]

VALID_FOR = dt.timedelta(days=30)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafka-tiered-processor dev stack"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    server: bool,
    hosts: tuple[str, ...] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            # a server's certificate is a client's too: the broker dials its own controller with it
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: Path, data: bytes, private: bool = False) -> str:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return str(path)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def make_dev_pki(
    folder: str | os.PathLike[str],
    client_key_password: str,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
) -> DevPki:
    """A fresh CA with a broker certificate for ``hosts`` and a client certificate, as PEM files."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca("dev stack CA")
    broker_cert, broker_key = _leaf(ca_cert, ca_key, "broker", server=True, hosts=hosts)
    client_cert, client_key = _leaf(ca_cert, ca_key, "processor", server=False)
    other_ca, _ = _ca("some other CA")
    return DevPki(
        ca_file=_write(root / "ca.pem", _cert_pem(ca_cert)),
        broker_cert=_write(root / "broker.pem", _cert_pem(broker_cert)),
        broker_key=_write(root / "broker-key.pem", _key_pem(broker_key), private=True),
        client_cert=_write(root / "client.pem", _cert_pem(client_cert)),
        client_key=_write(root / "client-key.pem", _key_pem(client_key, client_key_password), private=True),
        client_key_password=client_key_password,
        untrusted_ca_file=_write(root / "untrusted-ca.pem", _cert_pem(other_ca)),
    )
