"""A test CA and a server certificate it signs, made with the openssl CLI for one run.

The unit tests serve them from a loopback TLS server; the launcher's TLS switch
(integration/tls_setup.py) from RocketMQ's servers. The key of the server certificate is PKCS#8
(openssl 3 writes new keys so), the only form Netty's ``SslContextBuilder.forServer`` reads.
Nothing made here is committed: the files live in the directory given, for that run only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
SERVER_CERT = "server.pem"
SERVER_KEY = "server-key.pem"
# Long enough for any run; a run makes its own.
VALIDITY_DAYS = 30
RSA_BITS = 2048
CA_SUBJECT = "/CN=rocketmq-spark test CA"
SERVER_SUBJECT = "/CN=rocketmq-spark test server"
# The loopback addresses tests reach servers at.
SERVER_SANS = ("IP:127.0.0.1", "DNS:localhost")


class CertificateToolError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class CertificateFiles:
    """The files one run's TLS uses."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise CertificateToolError("openssl is not on PATH; test certificates need it") from err
    except subprocess.CalledProcessError as err:
        raise CertificateToolError(f"openssl {args[0]} failed: {err.stderr.strip()}") from err


def make_test_certificates(
    directory: Path, sans: Sequence[str] = SERVER_SANS, days: int = VALIDITY_DAYS
) -> CertificateFiles:
    """A fresh CA and a server certificate it signs for ``sans`` (``IP:...``, ``DNS:...``)."""
    directory.mkdir(parents=True, exist_ok=True)
    certs = CertificateFiles(directory / CA_CERT, directory / SERVER_CERT, directory / SERVER_KEY)
    csr, ext = "server.csr", "server.ext"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        f"rsa:{RSA_BITS}",
        "-nodes",
        "-keyout",
        CA_KEY,
        "-out",
        CA_CERT,
        "-days",
        str(days),
        "-subj",
        CA_SUBJECT,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )
    _openssl(
        "req",
        "-newkey",
        f"rsa:{RSA_BITS}",
        "-nodes",
        "-keyout",
        SERVER_KEY,
        "-out",
        csr,
        "-subj",
        SERVER_SUBJECT,
        cwd=directory,
    )
    (directory / ext).write_text(
        f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        csr,
        "-CA",
        CA_CERT,
        "-CAkey",
        CA_KEY,
        "-CAcreateserial",
        "-out",
        SERVER_CERT,
        "-days",
        str(days),
        "-extfile",
        ext,
        cwd=directory,
    )
    return certs
