"""Least-privilege users through a 5.x proxy's remoting port, with ACL 2.0 authentication and
authorization on: the grants of docs/security.md, the proxy in cluster mode in front of one
broker (``nameServer`` names the proxy).

The proxy runs ACL 2.0 as cluster_config.proxy_settings sets it up: it checks each client itself,
with the users and ACLs the broker keeps, and signs what it forwards as the cluster's super user.
So every refusal through it is the proxy's own, answered as SYSTEM_ERROR (1) with the wording of
the brokers' refusal (NO_PERMISSION directly):

* a reader with ``Sub`` on its topic and group streams with commits and backfills;
* a writer with ``Pub`` on its topic writes;
* each grant taken away fails the query in seconds, naming the resource and the grant line. A
  topic the user holds nothing on is refused at its route (the name server checks no route):
  the error gives the line for reading and for writing, as a route names no use;
* a search by time needs no ``Get`` here: 5.3.3's proxy does not check the requests whose action
  only a header annotation names (nothing in it fills ``RequestHeaderRegistry``, which the broker
  fills at start), and the broker sees them signed as the super user.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, Cluster, ClusterConfig, ClusterError
from integration.cluster_config import shifted
from integration.constants import FIRST
from integration.failfast import FAIL_FAST_LIMIT_S, FAIL_FAST_TIMEOUT_MS, Overhead, fail_query
from integration.support import eventually, own_cluster
from integration.tests.test_least_privilege import BATCH_READ_GROUP, keys, keys_into_memory, make_user
from rocketmq_spark.model import Credentials
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

# Ports of this module's cluster alone.
NAMESRV_PORT = shifted(17876)
BROKER_PORT = shifted(18911)
PROXY_REMOTING_PORT = shifted(17080)
PROXY_GRPC_PORT = shifted(17081)

QUEUES = 2
WAVE = 12
# The proxy's answer to a refused request, and the request that meets a topic first through it.
PROXY_REFUSAL = f"SYSTEM_ERROR ({int(ResponseCode.SYSTEM_ERROR)}) to request"
ROUTE_REQUEST = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
PULL_REQUEST = int(RequestCode.PULL_MESSAGE)
# A stream asks its group's stored offsets before it pulls.
STORED_OFFSET_REQUEST = int(RequestCode.QUERY_CONSUMER_OFFSET)


@dataclass
class Proxied:
    """The module's cluster, its topics and group, and its users."""

    cluster: Cluster
    topic: str
    out: str
    group: str
    reader: Credentials
    writer: Credentials
    without_topic: Credentials
    without_group: Credentials

    def admin(self, command: str, *args: str) -> list[dict[str, Any]]:
        """The Java tool as the cluster's super user, at the name server."""
        return self.cluster.tool(command, *args, "--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)

    def produce(self, prefix: str) -> list[dict[str, Any]]:
        return self.admin("produce", "--topic", self.topic, "--count", str(WAVE), "--keys", prefix + "-{i}")

    def stored(self) -> dict[int, int | None]:
        rows = self.admin("offsets", "--topic", self.topic, "--group", self.group)
        return {row["queueId"]: row["consumerOffset"] for row in rows}

    def ends(self, topic: str) -> dict[int, int]:
        return {row["queueId"]: row["maxOffset"] for row in self.admin("offsets", "--topic", topic, "--group", "any")}

    def options(self, user: Credentials, **extra: str) -> dict[str, str]:
        """Options of a query through the proxy's remoting port."""
        return {
            "nameServer": self.cluster.config.proxy_addr,
            "accessKey": user.access_key,
            "secretKey": user.secret_key,
            **extra,
        }


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    config = ClusterConfig(
        workdir=tmp_path_factory.mktemp("proxy-acl"),
        brokers=1,
        acl=True,
        proxy=True,
        namesrv_port=NAMESRV_PORT,
        broker_ports=(BROKER_PORT,),
        proxy_remoting_port=PROXY_REMOTING_PORT,
        proxy_grpc_port=PROXY_GRPC_PORT,
        timer_messages=False,
    )
    release = config.release
    if not (release.has_proxy and release.authorizes):
        raise ClusterError(
            f"RocketMQ {release.version} has no proxy or its brokers cannot authorize here "
            "(integration/versions.py): run this module on 5.3.3 or 5.5.0"
        )
    with own_cluster(config) as handle:
        cluster = handle.started
        run = uuid.uuid4().hex[:8]
        topic, out, group = f"pa-in-{run}", f"pa-out-{run}", f"pa-group-{run}"
        for name in (topic, out):
            cluster.tool(
                "create-topic",
                "--topic",
                name,
                "--queues",
                str(QUEUES),
                "--access-key",
                ACL_USER,
                "--secret-key",
                ACL_PASSWORD,
            )
        yield Proxied(
            cluster,
            topic,
            out,
            group,
            reader=make_user(cluster, "reader", "Sub", f"Topic:{topic}", f"Group:{group}"),
            writer=make_user(cluster, "writer", "Pub", f"Topic:{out}"),
            without_topic=make_user(cluster, "no-topic", "Sub", f"Group:{group}"),
            without_group=make_user(cluster, "no-group", "Sub", f"Topic:{topic}"),
        )


def test_a_reader_with_sub_only_streams_and_commits_through_the_proxy(
    spark: Any, proxied: Proxied, tmp_path: Path
) -> None:
    first = proxied.produce("w1")
    options = proxied.options(proxied.reader, topic=proxied.topic, consumerGroup=proxied.group, consumeFromWhere=FIRST)
    query = keys_into_memory(spark, options, "proxy_least_privilege", tmp_path / "checkpoint")
    try:

        def settled(expected: Counter[str]) -> bool:
            assert query.exception() is None, query.exception()
            read = keys(spark.sql("SELECT keys FROM proxy_least_privilege").collect())
            return read == expected and proxied.stored() == proxied.ends(proxied.topic)

        eventually(lambda: settled(keys(first)), "the wave was not read and committed through the proxy")
        assert query.isActive
    finally:
        query.stop()


def test_a_reader_with_sub_only_backfills_through_the_proxy(spark: Any, proxied: Proxied) -> None:
    sent = proxied.produce("b")
    ends = proxied.ends(proxied.topic)
    options = proxied.options(
        proxied.reader,
        topic=proxied.topic,
        consumerGroup=proxied.group,
        startingOffsets="earliest",
        endingOffsets="latest",
    )
    rows = spark.read.format("rocketmq").options(**options).load().select("keys").collect()
    assert len(rows) == sum(ends.values())
    assert keys(sent) <= keys(rows)


def test_through_the_proxy_a_search_by_time_needs_no_get(spark: Any, proxied: Proxied) -> None:
    """Directly the broker refuses it without Get (test_least_privilege); 5.3.3's proxy lets it
    through, as the module's docstring says why."""
    proxied.produce("t")
    ends = proxied.ends(proxied.topic)
    options = proxied.options(proxied.reader, topic=proxied.topic, consumerGroup=proxied.group, startingTimestamp="0")
    assert spark.read.format("rocketmq").options(**options).load().count() == sum(ends.values())


def test_a_writer_with_pub_only_writes_through_the_proxy(spark: Any, proxied: Proxied) -> None:
    rows = [(f"spark-{i}", f"body-{i}") for i in range(WAVE)]
    (
        spark.createDataFrame(rows, "keys STRING, body STRING")
        .write.format("rocketmq")
        .options(**proxied.options(proxied.writer, topic=proxied.out))
        .mode("append")
        .save()
    )
    read = proxied.admin("consume", "--topic", proxied.out, "--count", str(WAVE), "--print")
    assert keys(read) == Counter(key for key, _ in rows)


# (user, query, options, the request refused, the resource and the grant line its error names)
DENIALS: dict[str, tuple[str, str, Callable[[Proxied], dict[str, str]], int, str, str]] = {
    "stream without Sub on its topic": (
        "without_topic",
        "stream",
        lambda p: {"topic": p.topic, "consumerGroup": p.group},
        ROUTE_REQUEST,
        "Topic:{topic}",
        "-a Sub -d Allow to read it",
    ),
    "stream without Sub on its group": (
        "without_group",
        "stream",
        lambda p: {"topic": p.topic, "consumerGroup": p.group},
        STORED_OFFSET_REQUEST,
        "Group:{group}",
        "-a Sub -d Allow",
    ),
    "batch read without a group it may use": (
        "reader",
        "batch",
        lambda p: {"topic": p.topic},
        PULL_REQUEST,
        f"Group:{BATCH_READ_GROUP}",
        "-a Sub -d Allow",
    ),
}


def assert_names_grant(error: str, request: int, resource: str, line: str) -> None:
    """The proxy's refusal, in the brokers' wording, and the grant the error adds to it."""
    assert f"{PROXY_REFUSAL} {request} from " in error, error
    assert f"has no permission to access {resource}" in error, error
    assert f"-s User:<accessKey> -r {resource} {line}" in error, error


@pytest.mark.parametrize("case", sorted(DENIALS))
def test_a_missing_grant_fails_a_read_through_the_proxy_in_seconds_naming_it(
    spark: Any, proxied: Proxied, overhead: Overhead, tmp_path: Path, case: str
) -> None:
    user, kind, make_options, request, resource, line = DENIALS[case]
    options = proxied.options(getattr(proxied, user), **make_options(proxied), pullTimeoutMs=str(FAIL_FAST_TIMEOUT_MS))
    extra_s, error = fail_query(kind, spark, options, tmp_path, overhead, case)
    assert_names_grant(error, request, resource.format(topic=proxied.topic, group=proxied.group), line)
    assert getattr(proxied, user).access_key not in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_a_missing_pub_fails_a_write_through_the_proxy_in_seconds_naming_it(
    spark: Any, proxied: Proxied, overhead: Overhead
) -> None:
    """The reader holds nothing on the writer's topic: the proxy refuses its route, and the error
    gives the line that lets the user write."""
    frame = spark.createDataFrame([("k", "b")], "keys STRING, body STRING")
    spark_s = overhead.batch_s()
    began = time.monotonic()
    with pytest.raises(Exception) as caught:  # Spark wraps the sink's error in its own
        frame.write.format("rocketmq").options(**proxied.options(proxied.reader, topic=proxied.out)).mode(
            "append"
        ).save()
    elapsed = time.monotonic() - began
    error = str(caught.value)
    assert_names_grant(error, ROUTE_REQUEST, f"Topic:{proxied.out}", "-a Pub -d Allow to write it")
    assert proxied.reader.access_key not in error
    print(f"a write without Pub failed after {elapsed:.1f} s, a batch read Spark refuses after {spark_s:.1f} s")
    assert elapsed - spark_s < FAIL_FAST_LIMIT_S, f"{elapsed - spark_s:.1f} s"
