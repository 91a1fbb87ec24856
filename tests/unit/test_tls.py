"""TLS: the options that set it (read and checked at load(), the trust bundle carried as text), the
context a client builds from them, and handshakes with loopback servers holding certificates of
test CAs: verified, unknown CA, a name the certificate lacks, plain text to a TLS-only server.
The integration tests do the same against RocketMQ servers (integration/tests/test_tls.py)."""

from __future__ import annotations

import logging
import pickle
import ssl
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.connection import Connection
from rocketmq_spark.remoting.errors import CertificateError, NameServersUnavailableError
from rocketmq_spark.remoting.tls import certificate_error, client_context
from rocketmq_spark.source.offset_reader import UNVERIFIED_TLS_WARNING
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.partition import make_partitions
from rocketmq_spark.source.planning import QueueRange
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.certificates import CertificateFiles, make_test_certificates
from tests.listeners import Listener

# Generous: handshakes on a loaded machine can take seconds.
TIMEOUT_S = 10.0
BASE = {"nameServer": "127.0.0.1:9876", "topic": "orders", "consumerGroup": "g"}
# OpenSSL's X509_V_ERR_CERT_HAS_EXPIRED.
CERT_HAS_EXPIRED = 10
FRESH_CONNECTIONS = 150
THREADS = 8
REQUESTS_PER_THREAD = 50


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CertificateFiles]:
    """Three test CAs, each with a server certificate: for 127.0.0.1 and localhost, for localhost
    only, and for 127.0.0.1 only."""
    root = tmp_path_factory.mktemp("certificates")
    return {
        "both": make_test_certificates(root / "both"),
        "dns": make_test_certificates(root / "dns", sans=("DNS:localhost",)),
        "ip": make_test_certificates(root / "ip", sans=("IP:127.0.0.1",)),
    }


@pytest.fixture
def serve() -> Iterator[Callable[[CertificateFiles], Listener]]:
    """A loopback TLS server with the given certificate, answering every request with SUCCESS."""
    made: list[Listener] = []

    def make(files: CertificateFiles) -> Listener:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(files.server_cert, files.server_key)
        made.append(Listener("answer", codes.ResponseCode.SUCCESS, tls=context))
        return made[-1]

    yield make
    for listener in made:
        listener.close()


def options(**extra: str) -> ClientConfig:
    return parse_options({**BASE, **extra}, kind=ReadKind.STREAM).client


def client(address: str, **extra: str) -> RocketMQClient:
    """A client of the options ``extra`` for the name server at ``address``."""
    config = parse_options(
        {**BASE, "nameServer": address, "pullTimeoutMs": str(int(TIMEOUT_S * 1000)), **extra}, kind=ReadKind.STREAM
    ).client
    return RocketMQClient(config)


# ------------------------------------------------------------------------------ options


def test_tls_is_off_and_verifying_by_default() -> None:
    config = options()
    assert (config.tls, config.tls_verify, config.tls_trust_pem, config.tls_trust_path) == (False, True, None, None)
    assert client_context(config) is None


def test_the_trust_bundle_is_read_at_load_and_travels_as_text(
    certs: dict[str, CertificateFiles], tmp_path: Path
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text(certs["both"].ca_cert.read_text())
    opts = parse_options({**BASE, "TLS": "true", "tlstrustcertpath": str(bundle)}, kind=ReadKind.STREAM)
    assert opts.client.tls_trust_pem == bundle.read_text() and opts.client.tls_trust_path == str(bundle)
    part = make_partitions(opts, [[QueueRange(MessageQueue("orders", "broker-a", 0), 0, 5)]])[0]
    bundle.unlink()  # an executor has no such file: what it gets is the pickled partition
    shipped = pickle.loads(pickle.dumps(part))
    context = client_context(shipped.task.client)
    assert context is not None and len(context.get_ca_certs()) == 1
    assert "BEGIN CERTIFICATE" not in f"{opts!r} {opts.client!r} {part!r}"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file or directory"),
        ("directory", "Is a directory"),
        (b"\x30\x82\x03\x0b\xff\xfe", "is not a PEM text file"),
        ("just some text\n", "holds no PEM certificate"),
        ("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n", "malformed certificate"),
    ],
)
def test_a_bundle_that_cannot_serve_fails_at_load(tmp_path: Path, content: str | bytes | None, problem: str) -> None:
    path = tmp_path / "ca.pem"
    if content == "directory":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    source = RocketMQDataSource({**BASE, "tls": "true", "tlsTrustCertPath": str(path)})
    with pytest.raises(ConfigurationError) as caught:
        source.schema()  # load()
    message = str(caught.value)
    assert message.startswith("option 'tlsTrustCertPath': ") and str(path) in message and problem in message
    assert "PEM file of the CA certificates" in message


@pytest.mark.parametrize(
    "extra", [{"tlsTrustCertPath": "/any/ca.pem"}, {"tlsVerify": "false"}, {"tls": "false", "tlsVerify": "false"}]
)
def test_tls_settings_without_tls_are_an_error(extra: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match=r"applies only to TLS connections\. Set tls=true, or remove"):
        options(**extra)


def test_verify_true_without_tls_is_the_default_and_accepted() -> None:
    assert options(tlsVerify="true").tls is False


def test_a_bundle_and_no_verification_contradict(certs: dict[str, CertificateFiles]) -> None:
    with pytest.raises(ConfigurationError, match="option 'tlsTrustCertPath': is unused with tlsVerify=false"):
        options(tls="true", tlsVerify="false", tlsTrustCertPath=str(certs["both"].ca_cert))


def test_tls_verify_takes_true_or_false() -> None:
    with pytest.raises(ConfigurationError, match="option 'tlsVerify': unknown value 'no'"):
        options(tls="true", tlsVerify="no")


# ------------------------------------------------------------------------------ contexts


def test_contexts_verify_names_and_chains_unless_told_not_to(certs: dict[str, CertificateFiles]) -> None:
    system = client_context(options(tls="true"))
    assert system is not None and system.verify_mode == ssl.CERT_REQUIRED and system.check_hostname
    bundle = client_context(options(tls="true", tlsTrustCertPath=str(certs["both"].ca_cert)))
    assert bundle is not None and bundle.verify_mode == ssl.CERT_REQUIRED and bundle.check_hostname
    assert [ca["subject"] for ca in bundle.get_ca_certs()] == [((("commonName", "rocketmq-spark test CA"),),)]
    anything = client_context(options(tls="true", tlsVerify="false"))
    assert anything is not None and anything.verify_mode == ssl.CERT_NONE and not anything.check_hostname


# ---------------------------------------------------------------------------- handshakes


def test_a_verified_connection_answers(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    server = serve(certs["both"])
    with client(server.address, tls="true", tlsTrustCertPath=str(certs["both"].ca_cert)) as verified:
        assert (
            verified.invoke(server.address, codes.RequestCode.GET_BROKER_CLUSTER_INFO).code
            == codes.ResponseCode.SUCCESS
        )
        assert verified._pool.get(server.address).tls_version in ("TLSv1.2", "TLSv1.3")


def test_an_unknown_ca_is_one_quick_error_naming_the_fix(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    server = serve(certs["both"])
    with client(server.address, tls="true") as unverified, pytest.raises(CertificateError) as caught:
        unverified.topic_route("orders")  # raised as it is, not as "no name server answered"
    assert str(caught.value) == (
        f"TLS certificate of {server.address} rejected: unable to get local issuer certificate: it is not signed "
        "by the system's CAs. Give the PEM certificate of the CA that signs the servers' certificates in "
        "tlsTrustCertPath, or, for tests only, set tlsVerify=false to accept any certificate"
    )
    assert not caught.value.retriable and caught.value.address == server.address


def test_another_ca_names_the_bundle(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    server = serve(certs["both"])
    other = str(certs["dns"].ca_cert)
    with client(server.address, tls="true", tlsTrustCertPath=other) as wrong, pytest.raises(CertificateError) as caught:
        wrong.topic_route("orders")
    assert f"it is not signed by the CAs of tlsTrustCertPath ({other})" in str(caught.value)


@pytest.mark.parametrize(
    ("files", "host", "reason", "needs"),
    [
        ("dns", "127.0.0.1", "IP address mismatch", "127.0.0.1 as an IP address"),
        ("ip", "localhost", "Hostname mismatch", "localhost as a DNS name"),
    ],
)
def test_the_address_connected_to_must_be_in_the_certificate(
    certs: dict[str, CertificateFiles],
    serve: Callable[[CertificateFiles], Listener],
    files: str,
    host: str,
    reason: str,
    needs: str,
) -> None:
    address = f"{host}:{serve(certs[files]).address.rpartition(':')[2]}"
    with (
        client(address, tls="true", tlsTrustCertPath=str(certs[files].ca_cert)) as checked,
        pytest.raises(CertificateError) as caught,
    ):
        checked.topic_route("orders")
    message = str(caught.value)
    assert f"TLS certificate of {address} rejected: {reason}" in message
    assert f"the certificate needs {needs} in its subject alternative names" in message, message


def test_verify_false_accepts_any_certificate(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    address = f"localhost:{serve(certs['ip']).address.rpartition(':')[2]}"
    with client(address, tls="true", tlsVerify="false") as anything:
        assert anything.invoke(address, codes.RequestCode.GET_BROKER_CLUSTER_INFO).code == codes.ResponseCode.SUCCESS


def test_plain_text_to_a_tls_only_server_suggests_tls(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    server = serve(certs["both"])
    with client(server.address) as plain, pytest.raises(NameServersUnavailableError) as caught:
        plain.topic_route("orders")
    # Closed or reset, depending on when the server drops it.
    message = str(caught.value)
    assert server.address in message and "; nothing was answered on it, as a server that accepts only TLS" in message
    assert "set tls=true" in message and caught.value.retriable


def test_an_expired_certificate_asks_for_renewal() -> None:
    err = ssl.SSLCertVerificationError(1, "certificate verify failed")
    err.verify_code, err.verify_message = CERT_HAS_EXPIRED, "certificate has expired"
    error = certificate_error("10.0.0.7:10911", err, options(tls="true"))
    assert str(error).startswith(
        "TLS certificate of 10.0.0.7:10911 rejected: certificate has expired. Renew the server's certificate"
    )
    assert not error.retriable


def test_the_fix_names_the_settings_as_whoever_built_the_config_calls_them() -> None:
    """The client knows no option: a config built from options names them, any other its fields."""
    err = ssl.SSLCertVerificationError(1, "certificate verify failed")
    err.verify_code, err.verify_message = CERT_HAS_EXPIRED, "certificate has expired"
    from_options = str(certificate_error("10.0.0.7:10911", err, options(tls="true")))
    by_hand = str(certificate_error("10.0.0.7:10911", err, ClientConfig(("10.0.0.7:9876",), tls=True)))
    assert from_options.endswith("or, for tests only, set tlsVerify=false to accept any certificate")
    assert by_hand.endswith("or, for tests only, set tls_verify=false to accept any certificate")


def test_fresh_connections_each_get_their_first_answer(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    """A reader thread reading while the first request is written: with one ssl.SSLSocket shared
    by both threads, about one connection in twenty-five lost that answer."""
    context = client_context(options(tls="true", tlsTrustCertPath=str(certs["both"].ca_cert)))
    for _ in range(FRESH_CONNECTIONS):
        server = serve(certs["both"])  # a fresh one each time, as the race needs the timing of one
        conn = Connection(server.address, connect_timeout=TIMEOUT_S, tls_context=context)
        try:
            assert (
                conn.request(RemotingCommand.request(codes.RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_S).code
                == codes.ResponseCode.SUCCESS
            )
        finally:
            conn.close()


def test_threads_share_a_tls_connection(
    certs: dict[str, CertificateFiles], serve: Callable[[CertificateFiles], Listener]
) -> None:
    server = serve(certs["both"])
    context = client_context(options(tls="true", tlsTrustCertPath=str(certs["both"].ca_cert)))
    conn = Connection(server.address, connect_timeout=TIMEOUT_S, tls_context=context)

    def ask(_: int) -> list[int]:
        return [
            conn.request(RemotingCommand.request(codes.RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_S).code
            for _ in range(REQUESTS_PER_THREAD)
        ]

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            answers = [code for codes_ in pool.map(ask, range(THREADS)) for code in codes_]
    finally:
        conn.close()
    assert answers == [codes.ResponseCode.SUCCESS] * (THREADS * REQUESTS_PER_THREAD)


# ------------------------------------------------------------------------------ warning


def test_no_verification_is_warned_about_once_per_query(caplog: pytest.LogCaptureFixture) -> None:
    """Once when the driver's reader first asks the brokers, not per trigger, connection or task."""
    opts = parse_options({**BASE, "tls": "true", "tlsVerify": "false"}, kind=ReadKind.STREAM)
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark"):
        reader = RocketMQStreamReader(opts)
        for _ in range(3):
            assert reader.offsets is reader.offsets
        shipped = pickle.loads(pickle.dumps(reader))  # what executors get for read()
        RocketMQClient(shipped.options.client).close()
        reader.stop()
    assert [r.getMessage() for r in caplog.records].count(UNVERIFIED_TLS_WARNING) == 1
