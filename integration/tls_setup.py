"""TLS for the launcher's servers: a test CA made at start-up, and the settings RocketMQ reads.

A cluster started with a TLS mode gets, under ``<workdir>/tls``, a CA made for that run and one
server certificate it signs (tests/certificates.py), valid for every address the servers are
reached at (``127.0.0.1`` as an IP SAN, ``localhost`` as a DNS SAN). Nothing here is committed:
the files exist only in the work directory of the run.

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

from pathlib import Path

from tests.certificates import CA_CERT, SERVER_CERT, SERVER_KEY, CertificateToolError, make_test_certificates

__all__ = [
    "CA_CERT",
    "TLS_DIR",
    "TLS_MODES",
    "CertificateToolError",
    "client_properties",
    "make_server_certificates",
    "proxy_settings",
    "server_properties",
]

TLS_ENFORCING = "enforcing"
TLS_PERMISSIVE = "permissive"
TLS_DISABLED = "disabled"
TLS_MODES = (TLS_ENFORCING, TLS_PERMISSIVE, TLS_DISABLED)
TLS_DIR = "tls"
CONFIG_FILE = "tls.properties"


def make_server_certificates(workdir: Path) -> None:
    """A CA made for this run and the servers' certificate, under ``<workdir>/tls``."""
    make_test_certificates(workdir / TLS_DIR)


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
        "tls.server.need.client.auth=none\n"
    )
    props["tls.config.file"] = str(config)
    return props


def client_properties() -> dict[str, str]:
    """System properties of a Java client (mqadmin, the test tool) that talks TLS. It trusts any
    certificate (RocketMQ's client test mode, the default): it only produces and checks test data."""
    return {"tls.enable": "true"}


def proxy_settings(workdir: Path) -> dict[str, object]:
    """What rmq-proxy.json needs for its gRPC port to serve the test CA's certificate."""
    directory = workdir / TLS_DIR
    return {
        "tlsTestModeEnable": False,
        "tlsCertPath": str(directory / SERVER_CERT),
        "tlsKeyPath": str(directory / SERVER_KEY),
    }
