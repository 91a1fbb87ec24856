"""The source and the sink as least-privilege users, beside RocketMQ's Java clients under the
same grants; docs/security.md is the table these grants stand for. The cluster is conftest's
``acl_cluster`` of the release under test: ACL 2.0 with authentication and authorization on
(5.x), or 4.9's plain ACL (``make compat ROCKETMQ_VERSION=4.9.7``).

Users are made as an operator makes them, with the release's mqadmin (run as the cluster's own
administrator): ``createUser`` and ``createAcl`` on 5.x; on 4.9 ``updateAclConfig``, an account
whose default topic and group permissions are DENY:

* a reader holds ``Sub`` on its topic and on its groups, nothing else: it streams with commits
  (shown by the release's own offsets), follows an operator's reset by time, and backfills;
  RocketMQ's subscribing Java consumer reads the same topic with the same grants;
* a writer holds ``Pub`` on its topic: the sink writes, and so does the Java producer;
* each grant taken away in turn (a user made without it) fails the query in seconds, with an error
  naming the resource, the action and the ``mqadmin`` line that grants it.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, CLUSTER_NAME, Cluster, ClusterError
from integration.constants import FIRST, TRIGGER
from integration.failfast import FAIL_FAST_LIMIT_S, FAIL_FAST_TIMEOUT_MS, Overhead, fail_query
from integration.support import eventually
from integration.versions import AclStyle
from rocketmq_spark.model import Credentials

pytestmark = pytest.mark.integration

QUEUES = 2
WAVE = 12
# mqadmin resets a group to the first message stored at or after this long before the first wave.
RESET_MARGIN_MS = 60_000
BATCH_READ_GROUP = "TOOLS_CONSUMER"  # the group a batch read without consumerGroup pulls as


@dataclass
class Granted:
    """The module's topics and groups on the ACL cluster, and its users."""

    cluster: Cluster
    topic: str
    out: str
    group: str
    java_group: str
    reader: Credentials
    writer: Credentials
    without_topic: Credentials
    without_group: Credentials

    def admin(self, command: str, *args: str) -> list[dict[str, Any]]:
        """The Java tool as the cluster's super user."""
        return self.cluster.tool(command, *args, "--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)

    def produce(self, topic: str, prefix: str) -> list[dict[str, Any]]:
        return self.admin("produce", "--topic", topic, "--count", str(WAVE), "--keys", prefix + "-{i}")

    def stored(self, topic: str, group: str) -> dict[int, int | None]:
        return {
            row["queueId"]: row["consumerOffset"] for row in self.admin("offsets", "--topic", topic, "--group", group)
        }

    def ends(self, topic: str) -> dict[int, int]:
        return {row["queueId"]: row["maxOffset"] for row in self.admin("offsets", "--topic", topic, "--group", "any")}

    def options(self, user: Credentials, **extra: str) -> dict[str, str]:
        return {
            "nameServer": self.cluster.namesrv_addr,
            "accessKey": user.access_key,
            "secretKey": user.secret_key,
            **extra,
        }


def plain_acl(cluster: Cluster) -> bool:
    return cluster.config.release.acl is AclStyle.PLAIN


def credentials(role: str) -> Credentials:
    """A new user's access key (named after its role) and secret."""
    return Credentials(f"{role}-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:12]}")


def plain_account(cluster: Cluster, user: Credentials, perms: Mapping[str, str]) -> None:
    """4.9's plain_acl.yml account of ``user``: DENY by default, and each resource ("Topic:t",
    "Group:g") with its permission ("SUB", "PUB|SUB")."""
    entries = {
        kind: ",".join(f"{r.split(':', 1)[1]}={perm}" for r, perm in perms.items() if r.startswith(kind))
        for kind in ("Topic", "Group")
    }
    cluster.mqadmin(
        "updateAclConfig",
        "-c",
        CLUSTER_NAME,
        "-a",
        user.access_key,
        "-s",
        user.secret_key,
        "-i",
        "DENY",
        "-u",
        "DENY",
        "-m",
        "false",
        *(("-t", entries["Topic"]) if entries["Topic"] else ()),
        *(("-g", entries["Group"]) if entries["Group"] else ()),
    )


def make_user(cluster: Cluster, role: str, actions: str, *resources: str) -> Credentials:
    """A user of its own allowed ``actions`` ("Sub", "Pub") on each resource ("Topic:t",
    "Group:g") and nothing else, as an operator makes one."""
    user = credentials(role)
    if plain_acl(cluster):
        plain_account(cluster, user, {r: actions.upper() for r in resources})
        return user
    cluster.mqadmin("createUser", "-c", CLUSTER_NAME, "-u", user.access_key, "-p", user.secret_key)
    subject = f"User:{user.access_key}"
    cluster.mqadmin(
        "createAcl", "-c", CLUSTER_NAME, "-s", subject, "-r", ",".join(resources), "-a", actions, "-d", "Allow"
    )
    return user


@pytest.fixture(scope="module")
def granted(acl_cluster: Cluster) -> Granted:
    release = acl_cluster.config.release
    if not release.authorizes:
        raise ClusterError(
            f"RocketMQ {release.version}'s brokers cannot authorize here (integration/versions.py says why): "
            "run this module on 4.9.7, 5.3.3 or 5.5.0"
        )
    run = uuid.uuid4().hex[:8]
    topic, out, group, java_group = f"lp-in-{run}", f"lp-out-{run}", f"lp-group-{run}", f"lp-java-{run}"
    for name in (topic, out):
        acl_cluster.tool(
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
    return Granted(
        acl_cluster,
        topic,
        out,
        group,
        java_group,
        reader=make_user(acl_cluster, "reader", "Sub", f"Topic:{topic}", f"Group:{group}", f"Group:{java_group}"),
        writer=make_user(acl_cluster, "writer", "Pub", f"Topic:{out}"),
        without_topic=make_user(acl_cluster, "no-topic", "Sub", f"Group:{group}"),
        without_group=make_user(acl_cluster, "no-group", "Sub", f"Topic:{topic}"),
    )


def keys(rows: list[Any]) -> Counter[str]:
    return Counter(row["keys"] for row in rows)


def keys_into_memory(spark: Any, options: dict[str, str], table: str, checkpoint: Path) -> Any:
    """A stream of the options' topic whose keys land in the memory table ``table``, a trigger a second."""
    return (
        spark.readStream.format("rocketmq")
        .options(**options)
        .load()
        .select("keys")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def test_a_reader_with_sub_only_streams_commits_and_follows_a_reset(
    spark: Any, granted: Granted, tmp_path: Path
) -> None:
    before_first = int(time.time() * 1000) - RESET_MARGIN_MS
    first = granted.produce(granted.topic, "w1")
    options = granted.options(granted.reader, topic=granted.topic, consumerGroup=granted.group, consumeFromWhere=FIRST)
    query = keys_into_memory(spark, options, "least_privilege", tmp_path / "checkpoint")
    try:

        def settled(expected: Counter[str]) -> bool:
            assert query.exception() is None, query.exception()
            read = keys(spark.sql("SELECT keys FROM least_privilege").collect())
            return read == expected and granted.stored(granted.topic, granted.group) == granted.ends(granted.topic)

        eventually(lambda: settled(keys(first)), "the first wave was not read and committed")
        # The operator sends the group back to before the first wave, as its super user.
        granted.cluster.mqadmin(
            "resetOffsetByTime", "-g", granted.group, "-t", granted.topic, "-s", str(before_first), "-f", "true"
        )
        second = granted.produce(granted.topic, "w2")
        eventually(lambda: settled(keys(first) + keys(first) + keys(second)), "the reset was not followed")
        assert query.isActive
    finally:
        query.stop()

    # RocketMQ's Java consumer with the same user, in a group of its own: subscribed, from the
    # first offset, committing at the end. The 5.x client's subscribed lite pull consumer read
    # nothing from a 4.9.7 broker in two minutes, even as its admin, so there it pulls each queue from its min offset (a 4.9 broker
    # checks no offset requests: SUB suffices) and commits nothing.
    subscribed = not plain_acl(granted.cluster)
    java = granted.cluster.tool(
        "consume",
        *(["--subscribe"] if subscribed else []),
        "--print",
        "--topic",
        granted.topic,
        "--group",
        granted.java_group,
        "--count",
        str(2 * WAVE),
        "--access-key",
        granted.reader.access_key,
        "--secret-key",
        granted.reader.secret_key,
    )
    assert keys(java) == keys(first) + keys(second)
    if subscribed:
        assert granted.stored(granted.topic, granted.java_group) == granted.ends(granted.topic)


def test_a_reader_with_sub_only_backfills(spark: Any, granted: Granted) -> None:
    sent = granted.produce(granted.topic, "b")
    ends = granted.ends(granted.topic)
    options = granted.options(
        granted.reader,
        topic=granted.topic,
        consumerGroup=granted.group,
        startingOffsets="earliest",
        endingOffsets="latest",
    )
    rows = spark.read.format("rocketmq").options(**options).load().select("keys", "queueId", "queueOffset").collect()
    assert len(rows) == sum(ends.values())
    assert keys(sent) <= keys(rows)


def test_a_writer_with_pub_only_writes_as_the_java_producer_does(spark: Any, granted: Granted) -> None:
    rows = [(f"spark-{i}", f"body-{i}") for i in range(WAVE)]
    (
        spark.createDataFrame(rows, "keys STRING, body STRING")
        .write.format("rocketmq")
        .options(**granted.options(granted.writer, topic=granted.out))
        .mode("append")
        .save()
    )
    java = granted.cluster.tool(
        "produce",
        "--topic",
        granted.out,
        "--count",
        str(WAVE),
        "--keys",
        "java-{i}",
        "--access-key",
        granted.writer.access_key,
        "--secret-key",
        granted.writer.secret_key,
    )
    assert [row["status"] for row in java] == ["SEND_OK"] * WAVE
    read = granted.admin("consume", "--topic", granted.out, "--count", str(2 * WAVE), "--print")
    assert keys(read) == Counter([key for key, _ in rows] + [row["keys"] for row in java])


# (user, what it is asked to do, options) -> the resource and the action its error must name.
DENIALS: dict[str, tuple[str, str, Callable[[Granted], dict[str, str]], str, str]] = {
    "stream without Sub on its topic": (
        "without_topic",
        "stream",
        lambda g: {"topic": g.topic, "consumerGroup": g.group},
        "Topic:{topic}",
        "Sub",
    ),
    "stream without Sub on its group": (
        "without_group",
        "stream",
        lambda g: {"topic": g.topic, "consumerGroup": g.group},
        "Group:{group}",
        "Sub",
    ),
    "batch read without a group it may use": (
        "reader",
        "batch",
        lambda g: {"topic": g.topic},
        f"Group:{BATCH_READ_GROUP}",
        "Sub",
    ),
    "batch read by time without Get": (
        "reader",
        "batch",
        lambda g: {"topic": g.topic, "consumerGroup": g.group, "startingTimestamp": "0"},
        "Topic:{topic}",
        "Sub,Get",
    ),
}


# 4.9's plain ACL does not check offsets or searches by time.
NEEDS_ACL2 = frozenset({"batch read by time without Get"})


def assert_names_grant(granted: Granted, error: str, resource: str, actions: str) -> None:
    """The refusal as the release words it, and the grant the error adds to it."""
    kind, name = resource.split(":", 1)
    if plain_acl(granted.cluster):
        assert f"No default permission for {kind.lower()}:{name}" in error, error
        assert f"add '{name}={actions.upper()}' to its {kind.lower()}Perms in plain_acl.yml" in error, error
    else:
        assert f"has no permission to access {resource}" in error, error
        assert f"-s User:<accessKey> -r {resource} -a {actions} -d Allow" in error, error


@pytest.mark.parametrize("case", sorted(DENIALS))
def test_a_missing_grant_fails_a_read_in_seconds_naming_it(
    spark: Any, granted: Granted, overhead: Overhead, tmp_path: Path, case: str
) -> None:
    user, kind, make_options, resource, actions = DENIALS[case]
    if case in NEEDS_ACL2 and plain_acl(granted.cluster):
        # Not a skip: on 4.9 the same read succeeds, which is what the release promises.
        rows = spark.read.format("rocketmq").options(**granted.options(granted.reader, **make_options(granted))).load()
        assert rows.count() == sum(granted.ends(granted.topic).values())
        return
    options = granted.options(getattr(granted, user), **make_options(granted), pullTimeoutMs=str(FAIL_FAST_TIMEOUT_MS))
    extra_s, error = fail_query(kind, spark, options, tmp_path, overhead, case)
    resource = resource.format(topic=granted.topic, group=granted.group)
    assert_names_grant(granted, error, resource, actions)
    assert getattr(granted, user).access_key not in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_a_missing_pub_fails_a_write_in_seconds_naming_it(spark: Any, granted: Granted, overhead: Overhead) -> None:
    """The reader may not publish to the writer's topic."""
    frame = spark.createDataFrame([("k", "b")], "keys STRING, body STRING")
    spark_s = overhead.batch_s()
    began = time.monotonic()
    with pytest.raises(Exception) as caught:  # Spark wraps the sink's error in its own
        frame.write.format("rocketmq").options(**granted.options(granted.reader, topic=granted.out)).mode(
            "append"
        ).save()
    elapsed = time.monotonic() - began
    error = str(caught.value)
    assert_names_grant(granted, error, f"Topic:{granted.out}", "Pub")
    print(f"a write without Pub failed after {elapsed:.1f} s, a batch read Spark refuses after {spark_s:.1f} s")
    assert elapsed - spark_s < FAIL_FAST_LIMIT_S, f"{elapsed - spark_s:.1f} s"
