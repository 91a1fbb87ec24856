"""Signed requests against a broker with ACL 2.0 authentication (RocketMQ 5.3.3).

The tests run on conftest's one-broker cluster with ``authenticationEnabled=true``
(``acl_cluster``, on ports apart from the shared cluster's), on a topic of the module's own. What
5.3.3 answers is pinned here:

* the broker refuses an unsigned request, a wrong signature and an unknown user alike with
  NO_PERMISSION (16), the remark naming the reason;
* the name server does not authenticate at all: routes come back to anyone.

Through Spark: a wrong secret fails a query at its start, and the credentials show nowhere in
what a query prints (plans, progress, errors, logs).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, CLUSTER_NAME, Cluster, ClusterError
from integration.cluster_config import BROKER_A
from integration.constants import ONE_HOUR_MS, PULL_BATCH, REPO
from integration.failfast import FAIL_FAST_LIMIT_S, FAIL_FAST_TIMEOUT_MS, Overhead, fail_query
from integration.support import logging_env
from rocketmq_spark.model import ClientConfig, Credentials, MessageQueue
from rocketmq_spark.records.walk import decode_messages
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.client import HIDDEN_ACCESS_KEY, Boundary, PullSpec, PullStatus, RocketMQClient
from rocketmq_spark.remoting.errors import AuthenticationError

pytestmark = pytest.mark.integration

QUEUES = 2
MESSAGES = 6
COMMITTED = 4
GOOD = Credentials(ACL_USER, ACL_PASSWORD)
WRONG_SECRET = Credentials(ACL_USER, ACL_PASSWORD + "-wrong")
UNKNOWN_USER = "nobody"
SIGNATURE_FAILED = "check signature failed."
NO_USER_NAME = "username cannot be null."
# RequestCode.AUTH_CREATE_USER of RocketMQ 5.x: only tests create users, so the package lacks it.
AUTH_CREATE_USER = 3001
RUN_TIMEOUT_S = 900


def signed_tool(cluster: Cluster, command: str, *args: str) -> list[dict[str, Any]]:
    """The Java tool, signing with the cluster's user as the official client's RPC hook does."""
    return cluster.tool(command, *args, "--access-key", GOOD.access_key, "--secret-key", GOOD.secret_key)


@dataclass
class AclCluster:
    """The ACL cluster and a topic on it whose queue 0 holds MESSAGES messages, as reported sent."""

    cluster: Cluster
    topic: str
    sent: list[dict[str, Any]]

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, BROKER_A, 0)

    def signed_tool(self, command: str, *args: str) -> list[dict[str, Any]]:
        return signed_tool(self.cluster, command, *args)

    @property
    def broker_addr(self) -> str:
        return self.cluster.config.broker_addr(0)

    def client(self, credentials: Credentials | None) -> RocketMQClient:
        return RocketMQClient(ClientConfig((self.cluster.namesrv_addr,), credentials=credentials))


@pytest.fixture(scope="module")
def acl(acl_cluster: Cluster) -> AclCluster:
    """conftest's cluster with authentication on, and the module's topic on it."""
    topic = f"it-acl-topic-{uuid.uuid4().hex[:8]}"
    signed_tool(acl_cluster, "create-topic", "--topic", topic, "--queues", str(QUEUES))
    sent = signed_tool(
        acl_cluster,
        "produce",
        "--topic",
        topic,
        "--count",
        str(MESSAGES),
        "--broker",
        BROKER_A,
        "--queue",
        "0",
        "--tags",
        "TagA",
        "--keys",
        "acl-{i}",
        "--print-body",
    )
    assert [row["status"] for row in sent] == ["SEND_OK"] * MESSAGES
    return AclCluster(acl_cluster, topic, sent)


def test_the_broker_really_enforces_authentication(acl: AclCluster) -> None:
    """The official producer without credentials is refused: the tests below test something."""
    with pytest.raises(ClusterError) as caught:
        acl.cluster.tool("produce", "--topic", acl.topic, "--count", "1")
    assert NO_USER_NAME in str(caught.value)
    assert all(
        row["maxOffset"] == (MESSAGES if row["queueId"] == 0 else 0)
        for row in acl.signed_tool("offsets", "--topic", acl.topic, "--group", "it-acl-probe")
    )


def test_signed_requests_route_pull_and_store_offsets(acl: AclCluster, unique: Callable[[str], str]) -> None:
    group = unique("it-acl-group")
    with acl.client(GOOD) as client:
        route = client.topic_route(acl.topic)
        address = route.master_address(BROKER_A)
        assert address == acl.broker_addr
        assert route.readable_queues() == [MessageQueue(acl.topic, BROKER_A, q) for q in range(QUEUES)]

        assert client.call(address, calls.min_offset(acl.queue)) == 0
        assert client.call(address, calls.max_offset(acl.queue)) == MESSAGES
        result = client.pull_async(address, PullSpec(acl.queue, group), 0, PULL_BATCH).result()
        assert result.status is PullStatus.FOUND
        messages = decode_messages(result.body)
        assert [(m.msg_id, m.queue_offset, m.keys, m.body) for m in messages] == [
            (row["msgId"], row["queueOffset"], row["keys"], base64.b64decode(row["body"])) for row in acl.sent
        ]

        assert client.call(address, calls.query_consumer_offset(acl.queue, group)).offset is None
        client.call(address, calls.update_consumer_offset(acl.queue, group, COMMITTED))
        assert client.call(address, calls.query_consumer_offset(acl.queue, group)).offset == COMMITTED

        first, last = messages[0].store_timestamp, messages[-1].store_timestamp
        assert client.call(address, calls.search_offset(acl.queue, first - ONE_HOUR_MS, Boundary.LOWER)).offset == 0
        assert (
            client.call(address, calls.search_offset(acl.queue, last + ONE_HOUR_MS, Boundary.LOWER)).offset == MESSAGES
        )
        assert client.call(address, calls.earliest_store_time(acl.queue)) == first

    official = {
        row["queueId"]: row["consumerOffset"]
        for row in acl.signed_tool("offsets", "--topic", acl.topic, "--group", group)
    }
    assert official == {0: COMMITTED, 1: None}


BROKER_CALLS: dict[str, Callable[[RocketMQClient, str, MessageQueue], object]] = {
    "pull": lambda c, a, q: c.pull_async(a, PullSpec(q, "it-acl-refused"), 0, PULL_BATCH).result(),
    "max_offset": lambda c, a, q: c.call(a, calls.max_offset(q)),
    "min_offset": lambda c, a, q: c.call(a, calls.min_offset(q)),
    "query_consumer_offset": lambda c, a, q: c.call(a, calls.query_consumer_offset(q, "it-acl-refused")).offset,
    "update_consumer_offset": lambda c, a, q: c.call(a, calls.update_consumer_offset(q, "it-acl-refused", 1)),
    "search_offset": lambda c, a, q: c.call(a, calls.search_offset(q, 0)).offset,
}


@pytest.mark.parametrize("call", sorted(BROKER_CALLS))
@pytest.mark.parametrize(
    ("credentials", "remark"),
    [
        pytest.param(WRONG_SECRET, SIGNATURE_FAILED, id="wrong-secret"),
        # The broker names the user ("User:nobody is not found."); the client hides the key.
        pytest.param(
            Credentials(UNKNOWN_USER, ACL_PASSWORD), f"User:{HIDDEN_ACCESS_KEY} is not found.", id="unknown-user"
        ),
        pytest.param(None, NO_USER_NAME, id="no-credentials"),
    ],
)
def test_the_broker_refuses_bad_or_missing_credentials(
    acl: AclCluster, credentials: Credentials | None, remark: str, call: str
) -> None:
    with acl.client(credentials) as client:
        with pytest.raises(AuthenticationError) as caught:
            BROKER_CALLS[call](client, acl.broker_addr, acl.queue)
    assert caught.value.code == codes.ResponseCode.NO_PERMISSION
    assert caught.value.remark == remark
    assert caught.value.retriable is False


@pytest.mark.parametrize("credentials", [None, WRONG_SECRET], ids=["no-credentials", "wrong-secret"])
def test_the_name_server_does_not_authenticate(acl: AclCluster, credentials: Credentials | None) -> None:
    with acl.client(credentials) as client:
        route = client.topic_route(acl.topic)
    assert route.master_address(BROKER_A) == acl.broker_addr


@pytest.fixture(scope="module")
def spark_user(acl: AclCluster) -> Credentials:
    """A user of its own, with a secret that cannot turn up in Spark's output by chance."""
    user = Credentials(f"spark-{uuid.uuid4().hex[:8]}", f"sk-{uuid.uuid4().hex}")
    info = {"username": user.access_key, "password": user.secret_key, "userType": "Normal", "userStatus": "enable"}
    with acl.client(GOOD) as client:
        response = client.invoke(
            acl.broker_addr, AUTH_CREATE_USER, {"username": user.access_key}, json.dumps(info).encode()
        )
    assert response.code == codes.ResponseCode.SUCCESS, response.remark
    # Authorization is on too: the user may subscribe to the topic, with the groups the run
    # names (unique's prefix) and the one a batch read without a group pulls as.
    resources = f"Topic:{acl.topic},Group:it-acl-spark*,Group:TOOLS_CONSUMER"
    subject = f"User:{user.access_key}"
    acl.cluster.mqadmin("createAcl", "-c", CLUSTER_NAME, "-s", subject, "-r", resources, "-a", "Sub,Get", "-d", "Allow")
    with acl.client(user) as client:
        assert client.call(acl.broker_addr, calls.max_offset(acl.queue)) == MESSAGES
    return user


@pytest.mark.parametrize("kind", ["stream", "batch"])
def test_a_wrong_secret_fails_a_query_at_once(
    acl: AclCluster, spark: Any, overhead: Overhead, kind: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    options = {
        "nameServer": acl.cluster.namesrv_addr,
        "topic": acl.topic,
        "consumerGroup": unique("it-acl-wrong"),
        "accessKey": WRONG_SECRET.access_key,
        "secretKey": WRONG_SECRET.secret_key,
        "pullTimeoutMs": str(FAIL_FAST_TIMEOUT_MS),
    }
    extra_s, error = fail_query(kind, spark, options, tmp_path, overhead, "wrong secret")
    assert f"from {acl.broker_addr}: {SIGNATURE_FAILED}" in error, error
    assert WRONG_SECRET.secret_key not in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_credentials_show_nowhere_in_what_a_query_prints(
    acl: AclCluster, spark_user: Credentials, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Plans, progress reports, errors and every log line of a whole Spark application that reads
    with the credentials, then with a wrong secret; see integration/credentials_run.py."""
    env, source_log = logging_env(tmp_path)
    wrong_secret = f"sk-{uuid.uuid4().hex}"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "integration.credentials_run",
            "--name-server",
            acl.cluster.namesrv_addr,
            "--topic",
            acl.topic,
            "--group",
            unique("it-acl-spark"),
            "--access-key",
            spark_user.access_key,
            "--secret-key",
            spark_user.secret_key,
            "--wrong-secret",
            wrong_secret,
            "--checkpoints",
            str(tmp_path / "checkpoints"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    results = {
        r["kind"]: r
        for r in (
            json.loads(line.removeprefix("RESULT ")) for line in run.stdout.splitlines() if line.startswith("RESULT ")
        )
    }
    logged = source_log.read_text()

    # What the search below searches really holds the run: rows read, plans, progress, the
    # refusals, Spark's log and the source's own log lines from Spark's Python workers.
    assert results["stream"]["rows"] == MESSAGES and results["stream"]["progress"] > 0
    assert results["batch"]["rows"] == MESSAGES
    for kind in ("stream", "batch"):
        assert SIGNATURE_FAILED in (results[f"{kind} with a wrong secret"]["error"] or ""), results
    assert run.stdout.count("== Physical Plan ==") == 3
    assert '"numInputRows"' in run.stdout
    assert "ERROR MicroBatchExecution" in run.stderr  # Spark's log of the failed stream, with its error
    assert "no stored offset for group" in logged

    everything = "\n".join([run.stdout, run.stderr, logged])
    for label, value in (
        ("secret key", spark_user.secret_key),
        ("wrong secret key", wrong_secret),
        ("access key", spark_user.access_key),
    ):
        assert value not in everything, f"the {label} shows: " + _around(everything, value)


def _around(text: str, value: str, context: int = 300) -> str:
    at = text.index(value)
    return text[max(0, at - context) : at + len(value) + context]
