"""TLS for the launcher's servers: a test CA made at start-up, and the settings RocketMQ reads.

A cluster started with a TLS mode gets, under ``<workdir>/tls``, a CA made for that run (its key
and certificate) and one server certificate it signs, valid for every address the servers are
reached at (``127.0.0.1`` as an IP SAN, ``localhost`` as a DNS SAN), with its key in PKCS#8 (the
only form Netty's ``SslContextBuilder.forServer`` reads). Nothing here is committed: the files
exist only in the work directory of the run.

RocketMQ's servers take TLS from system properties and a properties file
(``TlsSystemConfig``/``TlsHelper`` in the remoting module):

- ``tls.server.mode``: ``disabled`` (plain only), ``permissive`` (both; RocketMQ's default),
  ``enforcing`` (TLS only). A system property only.
- ``tls.enable``: whether the JVM's own clients (a broker registering with the name server, the
  proxy reaching brokers, mqadmin, the Java tool) use TLS. A system property only.
- ``tls.config.file``: the rest, among them ``tls.test.mode.enable`` (true: a self-signed
  certificate made at start-up, and clients that trust anything), ``tls.server.certPath`` and
  ``tls.server.keyPath``. Servers' clients keep trusting any certificate
  (``tls.client.authServer`` false), as RocketMQ does by default.

The proxy's gRPC port reads its certificate from its own config (``tlsCertPath``/``tlsKeyPath``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TLS_ENFORCING = "enforcing"
TLS_PERMISSIVE = "permissive"
TLS_DISABLED = "disabled"
TLS_MODES = (TLS_ENFORCING, TLS_PERMISSIVE, TLS_DISABLED)

TLS_DIR = "tls"
CA_CERT = "ca.pem"
SERVER_CERT = "server.pem"
SERVER_KEY = "server-key.pem"
CONFIG_FILE = "tls.properties"
# Long enough for any run; the CA is made again at every start.
VALIDITY_DAYS = 30
RSA_BITS = 2048
CA_SUBJECT = "/CN=rocketmq-spark test CA"
SERVER_SUBJECT = "/CN=rocketmq-spark test server"
# Every address the launcher's servers are reached at.
SERVER_SANS = ("IP:127.0.0.1", "DNS:localhost")


class CertificateToolError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class TestCertificates:
    """The files one run's TLS uses."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise CertificateToolError("openssl is not on PATH; the launcher's TLS switch needs it") from err
    except subprocess.CalledProcessError as err:
        raise CertificateToolError(f"openssl {args[0]} failed: {err.stderr.strip()}") from err


def make_test_certificates(workdir: Path, sans: Sequence[str] = SERVER_SANS,
                           days: int = VALIDITY_DAYS) -> TestCertificates:
    """A fresh CA and a server certificate it signs for ``sans``, under ``<workdir>/tls``."""
    directory = workdir / TLS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    certs = TestCertificates(directory / CA_CERT, directory / SERVER_CERT, directory / SERVER_KEY)
    ca_key, csr, ext = "ca-key.pem", "server.csr", "server.ext"
    _openssl("req", "-x509", "-newkey", f"rsa:{RSA_BITS}", "-nodes", "-keyout", ca_key, "-out", CA_CERT,
             "-days", str(days), "-subj", CA_SUBJECT, "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    # openssl 3 writes new keys in PKCS#8 ("BEGIN PRIVATE KEY"), which Netty needs.
    _openssl("req", "-newkey", f"rsa:{RSA_BITS}", "-nodes", "-keyout", SERVER_KEY, "-out", csr,
             "-subj", SERVER_SUBJECT, cwd=directory)
    (directory / ext).write_text(f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\n"
                                 "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", csr, "-CA", CA_CERT, "-CAkey", ca_key, "-CAcreateserial",
             "-out", SERVER_CERT, "-days", str(days), "-extfile", ext, cwd=directory)
    return certs


def server_properties(workdir: Path, mode: str) -> dict[str, str]:
    """System properties of a server JVM in TLS ``mode``, writing the config file they name.

    The certificates must exist (``make_test_certificates``) unless the mode is disabled.
    """
    props = {"tls.server.mode": mode, "tls.enable": str(mode != TLS_DISABLED).lower()}
    if mode == TLS_DISABLED:
        return props
    directory = workdir / TLS_DIR
    config = directory / CONFIG_FILE
    config.write_text(
        "tls.test.mode.enable=false\n"
        f"tls.server.certPath={directory / SERVER_CERT}\n"
        f"tls.server.keyPath={directory / SERVER_KEY}\n"
        "tls.server.need.client.auth=none\n")
    props["tls.config.file"] = str(config)
    return props


def client_properties() -> dict[str, str]:
    """System properties of a Java client (mqadmin, the test tool) that talks TLS. It trusts any
    certificate (RocketMQ's client test mode, the default): it only produces and checks test data."""
    return {"tls.enable": "true"}


def proxy_settings(workdir: Path) -> dict[str, object]:
    """What rmq-proxy.json needs for its gRPC port to serve the test CA's certificate."""
    directory = workdir / TLS_DIR
    return {"tlsTestModeEnable": False, "tlsCertPath": str(directory / SERVER_CERT),
            "tlsKeyPath": str(directory / SERVER_KEY)}
