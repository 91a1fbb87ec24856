"""TLS with verified certificates, against a RocketMQ whose servers accept TLS connections only.

The module starts its own cluster (a name server and one broker, ``tls.server.mode=enforcing``,
certificates of a CA made for the run; see integration/tls_setup.py) on ports apart from the
shared cluster's, and a name server alone with TLS disabled. Through Spark:

* with the CA in ``tlsTrustCertPath`` a batch read and a stream read everything;
* without it, the query fails at once naming the certificate, the reason and the fix;
* ``tlsVerify=false`` reads everything and warns once in the whole application;
* TLS to a plain port, and plain to a TLS-only port, each fail within 3 x pullTimeoutMs with an
  error that says what probably happened (the other fast failures: test_fast_failures.py);
* the sink writes over verified TLS what the Java consumer reads back exactly, and a plain write
  to the TLS-only servers fails saying they accept only TLS.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import Cluster, ClusterConfig, shifted
from integration.failfast import FAIL_FAST_LIMIT_S, FAIL_FAST_TIMEOUT_MS, Overhead, fail_query
from integration.support import collect_available_now, own_cluster
from integration.tls_setup import TLS_DISABLED, TLS_ENFORCING
from rocketmq_spark.model import MS_PER_SECOND, ClientConfig
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.errors import CertificateError, NameServersUnavailableError
from rocketmq_spark.remoting.tls import read_trust_bundle
from rocketmq_spark.source.offset_reader import UNVERIFIED_TLS_WARNING

pytestmark = pytest.mark.integration

# Ports of their own, so these servers run next to the shared cluster and the other modules'.
TLS_NAMESRV_PORT = shifted(23876)
TLS_BROKER_PORT = shifted(24911)
PLAIN_NAMESRV_PORT = shifted(25876)
TOPIC = "it-tls-topic"
QUEUES = 2
MESSAGES = 12
KEYS = sorted(f"tls-{i}" for i in range(MESSAGES))
# Another loopback address of this host, which the servers' certificate does not name.
UNNAMED_LOOPBACK = "127.0.0.2"
# The sink's writes: rows of their own topic, each with a body, a tag and a key of its row.
SINK_TOPIC = "it-tls-sink"
SINK_ROWS = 300
SINK_TAGS = 3
# Spark's switch that keeps Python workers' log records (spark.tvf.python_worker_logs()).
WORKER_LOGGING = "spark.sql.pyspark.worker.logging.enabled"


@dataclass
class TlsCluster:
    """The TLS-only cluster, with TOPIC holding MESSAGES messages, and a plain name server."""

    cluster: Cluster
    plain_namesrv_addr: str

    @property
    def namesrv_addr(self) -> str:
        return self.cluster.namesrv_addr

    @property
    def ca_cert(self) -> str:
        return str(self.cluster.ca_cert)

    def options(self, **extra: str) -> dict[str, str]:
        return {"nameServer": self.namesrv_addr, "topic": TOPIC, "pullTimeoutMs": str(FAIL_FAST_TIMEOUT_MS), **extra}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    with (
        own_cluster(
            ClusterConfig(
                workdir=tmp_path_factory.mktemp("tls-cluster"),
                brokers=1,
                tls=TLS_ENFORCING,
                namesrv_port=TLS_NAMESRV_PORT,
                broker_ports=(TLS_BROKER_PORT,),
                timer_messages=False,
            )
        ) as tls,
        own_cluster(
            ClusterConfig(
                workdir=tmp_path_factory.mktemp("plain-namesrv"),
                brokers=0,
                tls=TLS_DISABLED,
                namesrv_port=PLAIN_NAMESRV_PORT,
            )
        ) as plain,
    ):
        cluster = tls.started
        cluster.tool("create-topic", "--topic", TOPIC, "--queues", str(QUEUES))
        sent = cluster.tool("produce", "--topic", TOPIC, "--count", str(MESSAGES), "--keys", "tls-{i}")
        assert [row["status"] for row in sent] == ["SEND_OK"] * MESSAGES
        cluster.tool("create-topic", "--topic", SINK_TOPIC, "--queues", str(QUEUES))
        yield TlsCluster(cluster, plain.namesrv_addr)


def keys_of(rows: list[Any]) -> list[str]:
    return sorted(row.keys for row in rows)


def test_the_servers_really_refuse_plain_connections(tls: TlsCluster) -> None:
    """A plain client is turned away, so the reads below go over TLS."""
    timeout_s = FAIL_FAST_TIMEOUT_MS / MS_PER_SECOND
    with RocketMQClient(ClientConfig((tls.namesrv_addr,), request_timeout=timeout_s)) as plain:
        with pytest.raises(NameServersUnavailableError, match="nothing was answered on it"):
            plain.topic_route(TOPIC)


def test_a_verified_batch_read_reads_everything(spark: Any, tls: TlsCluster) -> None:
    reader = spark.read.format("rocketmq")
    for key, value in tls.options(tls="true", tlsTrustCertPath=tls.ca_cert, minPartitions=str(QUEUES)).items():
        reader = reader.option(key, value)
    assert keys_of(reader.load().collect()) == KEYS


def test_a_verified_stream_reads_everything(spark: Any, tls: TlsCluster, tmp_path: Path) -> None:
    stream = spark.readStream.format("rocketmq")
    for key, value in tls.options(
        tls="true", tlsTrustCertPath=tls.ca_cert, consumerGroup="it-tls-verified", startingOffsets="earliest"
    ).items():
        stream = stream.option(key, value)
    assert keys_of(collect_available_now(stream.load(), tmp_path / "checkpoint")) == KEYS


@pytest.mark.parametrize("kind", ["stream", "batch"])
def test_without_the_ca_a_query_fails_at_once_naming_the_certificate(
    spark: Any, tls: TlsCluster, overhead: Overhead, kind: str, tmp_path: Path
) -> None:
    options = tls.options(tls="true", consumerGroup="it-tls-unverified")
    extra_s, error = fail_query(kind, spark, options, tmp_path, overhead, "without the CA")
    assert f"TLS certificate of {tls.namesrv_addr} rejected: unable to get local issuer certificate" in error, error
    assert "not signed by the system's CAs" in error and "tlsTrustCertPath" in error and "tlsVerify=false" in error
    assert "no name server answered" not in error  # raised as it is: not retried, not tried elsewhere
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_an_address_the_certificate_does_not_name_is_refused(tls: TlsCluster) -> None:
    """The name checked is the address connected to: the certificate names 127.0.0.1, not .2."""
    address = f"{UNNAMED_LOOPBACK}:{TLS_NAMESRV_PORT}"
    config = ClientConfig(
        (address,), tls=True, tls_trust_pem=read_trust_bundle(tls.ca_cert), tls_trust_path=tls.ca_cert
    )
    with RocketMQClient(config) as client, pytest.raises(CertificateError) as caught:
        client.topic_route(TOPIC)
    message = str(caught.value)
    assert f"TLS certificate of {address} rejected: IP address mismatch" in message, message
    assert f"the certificate needs {UNNAMED_LOOPBACK} as an IP address in its subject alternative names" in message
    assert not caught.value.retriable


def test_tls_verify_false_reads_everything_and_warns_once(spark: Any, tls: TlsCluster) -> None:
    """Spark keeps what the Python processes of a query (its planning, each task) log while
    ``spark.sql.pyspark.worker.logging.enabled`` is on: the warning is there once for a read of
    several tasks."""

    def warnings() -> int:
        logs = spark.tvf.python_worker_logs()
        return logs.where(logs.msg.contains(UNVERIFIED_TLS_WARNING)).count()

    spark.conf.set(WORKER_LOGGING, "true")
    try:
        before = warnings()
        reader = spark.read.format("rocketmq")
        for key, value in tls.options(tls="true", tlsVerify="false", minPartitions=str(QUEUES)).items():
            reader = reader.option(key, value)
        df = reader.load()
        assert df.rdd.getNumPartitions() >= QUEUES
        assert keys_of(df.collect()) == KEYS
        assert warnings() - before == 1
    finally:
        spark.conf.unset(WORKER_LOGGING)


def test_tls_to_a_plain_port_fails_fast(spark: Any, tls: TlsCluster, overhead: Overhead, tmp_path: Path) -> None:
    options = {
        **tls.options(tls="true", tlsTrustCertPath=tls.ca_cert, consumerGroup="it-tls-to-plain"),
        "nameServer": tls.plain_namesrv_addr,
    }
    extra_s, error = fail_query("stream", spark, options, tmp_path, overhead, "TLS to a plain name server")
    assert f"TLS handshake with {tls.plain_namesrv_addr} failed (the server closed the connection" in error, error
    assert "may not accept TLS on this port" in error and "leave tls unset" in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_plain_to_a_tls_port_fails_fast(spark: Any, tls: TlsCluster, overhead: Overhead, tmp_path: Path) -> None:
    options = tls.options(consumerGroup="it-plain-to-tls")
    extra_s, error = fail_query("stream", spark, options, tmp_path, overhead, "plain to a TLS-only name server")
    assert tls.namesrv_addr in error and "nothing was answered on it" in error, error
    assert "accepts only TLS" in error and "set tls=true" in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def tls_write(df: Any, cluster: TlsCluster, **extra: str) -> None:
    """A batch write of ``df`` to SINK_TOPIC on the TLS-only cluster, with ``extra`` options."""
    writer = df.write.format("rocketmq").mode("append")
    for key, value in {**cluster.options(**extra), "topic": SINK_TOPIC}.items():
        writer = writer.option(key, value)
    writer.save()


def test_a_verified_write_reads_back_exactly(spark: Any, tls: TlsCluster) -> None:
    df = spark.range(SINK_ROWS).selectExpr(
        "cast(concat('tls-body-', id) as binary) as body",
        f"concat('tag-', id % {SINK_TAGS}) as tags",
        "concat('key-', id) as keys",
    )
    tls_write(df.repartition(QUEUES), tls, tls="true", tlsTrustCertPath=tls.ca_cert)
    read = tls.cluster.tool("consume", "--topic", SINK_TOPIC, "--count", str(SINK_ROWS), "--print")
    got = sorted((base64.b64decode(m["body"]).decode(), m["tags"], m["keys"]) for m in read)
    assert got == sorted((f"tls-body-{i}", f"tag-{i % SINK_TAGS}", f"key-{i}") for i in range(SINK_ROWS))


def test_a_plain_write_to_the_tls_only_servers_fails_saying_so(spark: Any, tls: TlsCluster) -> None:
    df = spark.createDataFrame([("plain",)], "body string")
    with pytest.raises(Exception) as caught:
        tls_write(df, tls)
    error = str(caught.value)
    assert tls.namesrv_addr in error and "accepts only TLS" in error and "set tls=true" in error, error
