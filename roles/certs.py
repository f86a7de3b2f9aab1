"""Throwaway certificates for mutual TLS: a CA and one certificate every party presents.

`fedlab run --tls` and `fedlab demo --tls` write them into the run directory (`tls/`), in the
files a cert-manager Secret holds (ca.crt, tls.crt, tls.key), so a run on a laptop exercises the
same mutual TLS as the chart's pods. Every party (source, warehouse, load generator, checker) is
both a server and a client, so the one certificate is valid for both (extended key usage
serverAuth and clientAuth), and names every host a peer dials: 127.0.0.1 and localhost by
default, or a cluster's Service names.

    tls = write_certificates("runs/x/tls")        # -> fedio.channels.TlsFiles

For a cluster, `fedlab tls-certs DIR --host lab-fedlab-warehouse --host lab-fedlab-src-s1 ...`
writes the same files naming the chart's Services; `kubectl create secret generic
fedlab-grpc-tls --from-file=DIR` makes the Secret `tls.secretName` names.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedlab.fedio.channels import TlsFiles

LOCAL_HOSTS = ("127.0.0.1", "localhost")
VALID_DAYS = 30   # throwaway: long enough for any run, short enough not to be kept


def write_certificates(folder: str | Path, hosts: Iterable[str] = LOCAL_HOSTS,
                       common_name: str = "fedlab") -> TlsFiles:
    """Creates a CA and a certificate signed by it naming `hosts` (IP addresses or DNS names) in
    `folder` as ca.crt, tls.crt and tls.key (the key readable by its owner only); returns them loaded."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    # Backdated a little: a peer whose clock is slightly behind still accepts it.
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} throwaway CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(not_before).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = folder / "tls.key"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return TlsFiles.load(folder / "ca.crt", folder / "tls.crt", key_path)


def add_arguments(parser) -> None:
    parser.add_argument("out", metavar="DIR", help="where ca.crt, tls.crt and tls.key go")
    parser.add_argument("--host", action="append", metavar="NAME",
                        help="a host peers dial (DNS name or IP address; repeatable; default 127.0.0.1 and localhost)")


def main(args) -> int:
    """`fedlab tls-certs DIR [--host NAME ...]`: prints the files written."""
    tls = write_certificates(args.out, args.host or LOCAL_HOSTS)
    print(f"wrote {tls.ca}, {tls.cert}, {tls.key} for {', '.join(args.host or LOCAL_HOSTS)}")
    return 0


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
