"""One view of a cluster per process: a Python worker that reads and writes one cluster asks the
name server once for a topic's route and holds one control connection per broker, whoever asks
(the driver's offset readers included), and the streams that share its client each answer what
brokers ask of them.

The name server and the broker are loopback servers that answer as real ones do (a route, a
heartbeat, a send, a pull), and count what they are asked and the connections they accept.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from rocketmq_spark.remoting import cluster as cluster_module
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client_requests import Members
from rocketmq_spark.remoting.cluster import shared_cluster
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.sink import shared as sink_shared
from rocketmq_spark.sink.columns import check_columns
from rocketmq_spark.sink.options import parse_sink_options
from rocketmq_spark.sink.task import write_task
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.partition_reader import read_partition
from tests.fake_queues import QUEUE, partition
from tests.listeners import AnsweringServer
from tests.records import record
from tests.support import options as options_of

RequestCode = codes.RequestCode
# Messages the fake queue holds: a read of [0, HELD) gets each once.
HELD = 3


class FakeBroker(AnsweringServer):
    """A 5.x master of ``QUEUE``'s broker name: registers producers, stores sends, serves pulls."""

    def answer(self, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.HEART_BEAT:
            return RemotingCommand(code=codes.ResponseCode.SUCCESS, version=codes.FIRST_5X_VERSION)
        if request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            fields = {"msgId": "00", "queueId": "0", "queueOffset": "0"}
            return RemotingCommand(code=codes.ResponseCode.SUCCESS, ext_fields=fields)
        if request.code == RequestCode.PULL_MESSAGE:
            offset = int(request.ext_fields["queueOffset"])
            body = b"".join(
                record(topic=QUEUE.topic.encode(), queue_id=QUEUE.queue_id, queue_offset=o) for o in range(offset, HELD)
            )
            fields = {"nextBeginOffset": str(HELD), "minOffset": "0", "maxOffset": str(HELD)}
            return RemotingCommand(code=codes.ResponseCode.SUCCESS, ext_fields=fields, body=body)
        return RemotingCommand(code=codes.ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="not in this fake")


class FakeNameServer(AnsweringServer):
    """Routes every topic to one broker name served by ``broker`` alone, writable and readable."""

    def __init__(self, broker: str) -> None:
        super().__init__()
        self.broker = broker

    def answer(self, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC, request.code
        route = {
            "queueDatas": [
                {"brokerName": QUEUE.broker_name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
            ],
            "brokerDatas": [{"brokerName": QUEUE.broker_name, "cluster": "c", "brokerAddrs": {"0": self.broker}}],
        }
        return RemotingCommand(code=codes.ResponseCode.SUCCESS, body=json.dumps(route).encode())


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeNameServer, FakeBroker]]:
    """A name server and its broker, and this process's views of clusters emptied for the test."""
    monkeypatch.setattr(cluster_module, "_clusters", {})
    monkeypatch.setattr(sink_shared, "_producers", {})
    broker = FakeBroker()
    name_server = FakeNameServer(broker.address)
    yield name_server, broker
    for cluster in cluster_module._clusters.values():
        cluster.client.close()
    name_server.close()
    broker.close()


def read_and_write(name_server: str) -> int:
    """A read task of ``QUEUE`` and a write task into its topic, as one worker runs them; the rows read."""
    options = parse_sink_options({"nameServer": name_server, "topic": QUEUE.topic})
    # The source's options make the same config of the shared options as the sink's do.
    source_config = options_of(streaming=True, nameServer=name_server).client
    assert source_config == options.client
    base = partition(0, HELD)
    part = dataclasses.replace(base, task=dataclasses.replace(base.task, client=source_config))
    read = sum(batch.num_rows for batch in read_partition(part))
    names = check_columns(StructType([StructField("body", BinaryType())]), QUEUE.topic).names
    written = write_task(options, names, iter([pa.record_batch({"body": pa.array([b"a", b"b"])})]))
    assert written.stored == 2
    return read


def test_a_worker_that_reads_and_writes_asks_the_name_server_once(
    servers: tuple[FakeNameServer, FakeBroker],
) -> None:
    name_server, broker = servers
    assert read_and_write(name_server.address) == HELD
    assert name_server.asked[RequestCode.GET_ROUTEINFO_BY_TOPIC] == 1  # the sink found the reader's route
    assert broker.asked[RequestCode.PULL_MESSAGE] >= 1 and broker.asked[RequestCode.HEART_BEAT] == 1
    config = parse_sink_options({"nameServer": name_server.address, "topic": QUEUE.topic}).client
    client = shared_cluster(config).client
    # One view, one control connection per server: the pulls go over the reading thread's own.
    assert len(cluster_module._clusters) == 1
    assert client.connections_opened(broker.address) == 1
    assert client.connections_opened(name_server.address) == 1
    assert broker.connections == 2 and name_server.connections == 1
    assert sink_shared.shared_producer(config, "rocketmq-spark-writer").client is client


def test_a_second_round_of_tasks_reuses_the_routes_and_connections(
    servers: tuple[FakeNameServer, FakeBroker],
) -> None:
    name_server, broker = servers
    read_and_write(name_server.address)
    read_and_write(name_server.address)
    assert name_server.asked[RequestCode.GET_ROUTEINFO_BY_TOPIC] == 1
    assert broker.connections == 2 and name_server.connections == 1


def test_the_driver_plans_on_the_view_its_tasks_use(servers: tuple[FakeNameServer, FakeBroker]) -> None:
    """A driver that also runs tasks (local mode's driver process runs none, but one process may
    plan a query and run another's tasks): its offset reader asks through the same view."""
    name_server, broker = servers
    options = options_of(streaming=True, nameServer=name_server.address)
    driver = OffsetReader(options)
    assert {q.queue_id for q in driver.queues()} == {0, 1, 2, 3}
    assert driver.client is shared_cluster(options.client).client
    assert read_and_write(name_server.address) == HELD
    assert name_server.asked[RequestCode.GET_ROUTEINFO_BY_TOPIC] == 1
    assert name_server.connections == 1 and broker.connections == 2
    assert OffsetReader(options).client is driver.client  # a second query of the same cluster


def running_info(client_id: str, group: str) -> RemotingCommand:
    fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
    return RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)


def reset(group: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {"topic": "t", "group": group})


def test_streams_sharing_a_client_each_answer_what_is_asked_of_them() -> None:
    """Two streams of group g and one of group h registered over one client: a request naming a
    client id reaches that stream alone; one naming a group, each stream of that group."""
    members = Members()
    heard: list[tuple[str, int]] = []

    def member(name: str) -> Callable[[RemotingCommand], RemotingCommand | None]:
        def answer(request: RemotingCommand) -> RemotingCommand | None:
            heard.append((name, request.code))
            return (
                None
                if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET
                else RemotingCommand(code=0, remark=name)
            )

        return answer

    members.add("id-1", "g", member("first"))
    members.add("id-2", "g", member("second"))
    members.add("id-3", "h", member("third"))
    answered = members(running_info("id-2", "g"))
    assert answered is not None and answered.remark == "second"
    assert members(reset("g")) is None
    assert heard == [
        ("second", RequestCode.GET_CONSUMER_RUNNING_INFO),
        ("first", RequestCode.RESET_CONSUMER_CLIENT_OFFSET),
        ("second", RequestCode.RESET_CONSUMER_CLIENT_OFFSET),
    ]
    members.remove("id-2")
    assert members(running_info("id-2", "g")) is None  # a stopped stream answers nothing
    assert members(running_info("id-9", "h")) is None
