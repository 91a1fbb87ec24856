"""TLS for connections to name servers, brokers and proxies: what is trusted, and why a server
was not.

Server certificates are verified by default, against the CAs of a PEM bundle the config carries,
else the system's. The name checked is the address connected to, as the name-server list and the
routes give it: for an IP address (brokers register their ``brokerIP1``), an IP address entry in
the certificate's subject alternative names; for a host name, a DNS entry. RocketMQ's Java client
checks no name at all; a connector that verifies certificates but not names would accept any
certificate the CA ever signed, for any server. ``tls_verify=False`` is RocketMQ's test mode: any
certificate, no name check.
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from rocketmq_spark.model import ClientConfig
from rocketmq_spark.remoting.errors import CertificateError

PEM_CERTIFICATE_MARKER = "-----BEGIN CERTIFICATE-----"

# OpenSSL's X509_V_ERR_* codes, grouped by what fixes them.
_UNKNOWN_ISSUER = frozenset(
    {
        2,  # UNABLE_TO_GET_ISSUER_CERT
        18,  # DEPTH_ZERO_SELF_SIGNED_CERT
        19,  # SELF_SIGNED_CERT_IN_CHAIN
        20,  # UNABLE_TO_GET_ISSUER_CERT_LOCALLY
        21,  # UNABLE_TO_VERIFY_LEAF_SIGNATURE
    }
)
_OUT_OF_DATE = frozenset(
    {
        9,  # CERT_NOT_YET_VALID
        10,  # CERT_HAS_EXPIRED
    }
)
_NAME_MISMATCH = frozenset(
    {
        62,  # HOSTNAME_MISMATCH
        64,  # IP_ADDRESS_MISMATCH
    }
)


def client_context(config: ClientConfig) -> ssl.SSLContext | None:
    """The TLS context of the config's connections; None for plain TCP."""
    if not config.tls:
        return None
    if not config.tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    # With a bundle, only its CAs are trusted; without, the system's.
    return ssl.create_default_context(cadata=config.tls_trust_pem)


def read_trust_bundle(path: str) -> str:
    """The text of a PEM file of CA certificates; ValueError saying why it cannot serve as one
    (unreadable, not text, no certificate in it, a malformed one)."""
    try:
        pem = Path(path).expanduser().read_text(encoding="ascii")
    except OSError as err:
        raise ValueError(f"cannot read '{path}': {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ValueError(
            f"'{path}' is not a PEM text file (a DER file converts with "
            "openssl x509 -inform der -in ca.der -out ca.pem)"
        ) from err
    if PEM_CERTIFICATE_MARKER not in pem:
        raise ValueError(f"'{path}' holds no PEM certificate (a '{PEM_CERTIFICATE_MARKER}' block)")
    try:
        ssl.create_default_context(cadata=pem)
    except ssl.SSLError as err:
        raise ValueError(f"'{path}' holds a malformed certificate ({err.reason or err})") from err
    return pem


def certificate_error(address: str, err: ssl.SSLCertVerificationError, config: ClientConfig) -> CertificateError:
    """The failure of ``address``'s certificate, with what went wrong and the fix for it, naming
    the settings to change as the config's ``setting_names`` call them."""
    reason = err.verify_message or str(err)
    code = err.verify_code
    names = config.setting_names
    trusted = (
        f"the CAs of {names.tls_trust} ({config.tls_trust_path})"
        if config.tls_trust_pem is not None
        else "the system's CAs"
    )
    test_only = f"or, for tests only, set {names.tls_verify}=false to accept any certificate"
    if code in _UNKNOWN_ISSUER:
        reason = f"{reason}: it is not signed by {trusted}"
        fix = (
            f"Give the PEM certificate of the CA that signs the servers' certificates in {names.tls_trust}, {test_only}"
        )
    elif code in _OUT_OF_DATE:
        fix = f"Renew the server's certificate (or correct this machine's clock), {test_only}"
    elif code in _NAME_MISMATCH:
        host = address.rpartition(":")[0].strip("[]")
        kind = "an IP address" if _is_ip(host) else "a DNS name"
        fix = (
            f"Connections check the address they use, as the name servers and routes give it: the "
            f"certificate needs {host} as {kind} in its subject alternative names (see the TLS section "
            f"of docs/operations.md), {test_only}"
        )
    else:
        fix = f"Check the server's certificate against {trusted}, {test_only}"
    return CertificateError(address, reason, fix)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
