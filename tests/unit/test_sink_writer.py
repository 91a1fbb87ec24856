"""The writers Spark gets: checked before any task runs, and a task's Arrow batches or rows sent."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql import Row as SparkRow
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.records.outgoing import UniqueIds
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.sink import task as writer_module
from rocketmq_spark.sink.columns import ColumnError
from rocketmq_spark.sink.shared import WorkerProducer
from rocketmq_spark.sink.writer import RocketMQBatchWriter, RocketMQStreamWriter, WrittenRows
from tests.fake_sends import FakeClient, inner_bodies, route

SCHEMA = StructType([StructField("body", BinaryType()), StructField("tags", StringType())])
OPTIONS = {"nameServer": "h:1", "topic": "t"}


def test_overwrite_is_refused_naming_append() -> None:
    with pytest.raises(ConfigurationError, match=r"option 'mode': overwrite.*mode\('append'\)"):
        RocketMQDataSource(dict(OPTIONS)).writer(SCHEMA, True)


def test_writers_check_columns_and_travel_to_executors() -> None:
    with pytest.raises(ColumnError, match="column 'topic': is missing"):
        RocketMQDataSource({"nameServer": "h:1"}).writer(SCHEMA, False)
    batch = RocketMQDataSource(dict(OPTIONS)).writer(SCHEMA, False)
    stream = RocketMQDataSource(dict(OPTIONS)).streamWriter(SCHEMA, False)
    assert isinstance(batch, RocketMQBatchWriter) and isinstance(stream, RocketMQStreamWriter)
    assert pickle.loads(pickle.dumps(batch)).names == {"body": "body", "tags": "tags"}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    fake = FakeClient()
    shared = WorkerProducer(fake, "g", "ip@x", UniqueIds(b"\x7f\x00\x00\x01", fixed=1), Replicas(lambda topic: route()))
    monkeypatch.setattr(writer_module, "shared_producer", lambda config, group: shared)
    return fake


def test_a_batch_task_sends_its_arrow_batches(client: FakeClient) -> None:
    writer = RocketMQDataSource({**OPTIONS, "batchMaxBytes": "0"}).writer(SCHEMA, False)
    batches = [pa.RecordBatch.from_pydict({"body": [b"1", b"2"], "tags": ["a", None]}) for _ in range(2)]
    assert writer.write(iter(batches)) == WrittenRows(4, 0)
    assert sorted(s.body for s in client.sent) == [b"1", b"1", b"2", b"2"]


def test_a_4_0_stream_task_sends_its_rows(client: FakeClient) -> None:
    writer = RocketMQDataSource(dict(OPTIONS)).streamWriter(SCHEMA, False)
    rows = [SparkRow(body=bytearray(b"%d" % i), tags="a") for i in range(3)]
    assert writer.write(iter(rows)) == WrittenRows(3, 0)
    assert sorted(b for s in client.sent for b in (inner_bodies(s.body) if s.code == 320 else [s.body])) == [
        b"0",
        b"1",
        b"2",
    ]


def test_an_empty_task_sends_nothing(client: FakeClient) -> None:
    assert RocketMQDataSource(dict(OPTIONS)).writer(SCHEMA, False).write(iter([])) == WrittenRows(0, 0)
    assert client.sent == [] and client.heartbeats == []
