"""The sink's Python side alone: one task's rows through ``write_task`` to a fake broker that
answers every send at once, on one core, without Spark or a cluster. The quick loop for the
sink's per-row cost; ``bench_sink.py`` measures the whole write against the Java producer.

Feeds ``--messages`` rows of ``--body-size`` bytes in Arrow batches of ``--batch-rows`` (Spark's
``maxRecordsPerBatch`` default), or as Spark ``Row`` objects (``--rows``, what a PySpark 4.0
stream gives), to a topic of 8 queues on 2 brokers, and prints the CPU seconds per message.

    python bench/bench_sink_python.py [--messages N] [--body-size B] [--batch-rows R] [--tags]
                                      [--rows] [--repeats K]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from common import ROOT

sys.path.insert(0, str(ROOT))

import pyarrow as pa

from rocketmq_spark.records.outgoing import UniqueIds
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codec import RemotingCommand, body_length
from rocketmq_spark.remoting.codes import FLAG_RESPONSE, ResponseCode
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.route import TopicRoute, parse_route
from rocketmq_spark.sink import writer as writer_module
from rocketmq_spark.sink.options import parse_sink_options
from rocketmq_spark.sink.shared import WorkerProducer

DEFAULT_MESSAGES = 200_000
DEFAULT_BODY_SIZE = 1024
# Spark's spark.sql.execution.arrow.maxRecordsPerBatch default.
DEFAULT_BATCH_ROWS = 10_000
DEFAULT_REPEATS = 3
BROKERS = ("broker-a", "broker-b")
QUEUES_PER_BROKER = 4
VERSION_5 = 479
TOPIC = "bench"
US_PER_SECOND = 1_000_000


class _Answer:
    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields

    def result(self) -> RemotingCommand:
        return RemotingCommand(
            code=ResponseCode.SUCCESS, flag=FLAG_RESPONSE, ext_fields=self._fields, version=VERSION_5
        )


class OkClient:
    """Answers heartbeats as a 5.x broker and every send SUCCESS, keeping only counts."""

    def __init__(self) -> None:
        self.sends = 0
        self.bytes = 0

    def call(self, address: str, call: Call[Any], timeout: float | None = None) -> Any:
        return call.read(RemotingCommand(code=0, flag=FLAG_RESPONSE, version=VERSION_5), address)

    def submit(self, address: str, call: Call[Any], timeout: float | None = None) -> _Answer:
        self.sends += 1
        self.bytes += body_length(call.body)
        queue = str(call.fields.get("e", 0))
        return _Answer({"msgId": "OFFSETID", "queueId": queue, "queueOffset": "0"})


def bench_route(topic: str) -> TopicRoute:
    datas = [{"brokerName": n, "readQueueNums": 4, "writeQueueNums": QUEUES_PER_BROKER, "perm": 6} for n in BROKERS]
    brokers = [{"brokerName": n, "brokerAddrs": {"0": f"{n}:1"}} for n in BROKERS]
    return parse_route(topic, json.dumps({"queueDatas": datas, "brokerDatas": brokers}).encode())


def arrow_batches(messages: int, body_size: int, batch_rows: int, tags: bool) -> list[pa.RecordBatch]:
    batches = []
    for start in range(0, messages, batch_rows):
        count = min(batch_rows, messages - start)
        bodies = [(b"%08d" % (start + i)).ljust(body_size, b"x") for i in range(count)]
        columns: dict[str, Any] = {"body": pa.array(bodies, pa.binary())}
        if tags:
            columns["tags"] = pa.array(["tag-a" if i % 2 else "tag-b" for i in range(count)])
        batches.append(pa.RecordBatch.from_pydict(columns))
    return batches


def spark_rows(batches: Iterable[pa.RecordBatch]) -> list[Any]:
    from pyspark.sql import Row

    return [Row(**row) for batch in batches for row in batch.to_pylist()]


def run_once(items: list[Any], names: dict[str, str], batch_max_bytes: int) -> tuple[float, OkClient, int]:
    client = OkClient()
    shared = WorkerProducer(client, "g", "ip@bench", UniqueIds(b"\x7f\x00\x00\x01"), Replicas(bench_route))
    writer_module.shared_producer = lambda config, group: shared  # type: ignore[assignment]
    options = parse_sink_options({"nameServer": "h:1", "topic": TOPIC, "batchMaxBytes": str(batch_max_bytes)})
    iterator: Iterator[Any] = iter(items)
    started = time.process_time()
    written = writer_module.write_task(options, names, iterator)
    return time.process_time() - started, client, written.stored


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--body-size", type=int, default=DEFAULT_BODY_SIZE)
    parser.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--batch-max-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--tags", action="store_true", help="add a tags column")
    parser.add_argument("--rows", action="store_true", help="Spark Row objects, as a PySpark 4.0 stream gives")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args(argv)
    batches = arrow_batches(args.messages, args.body_size, args.batch_rows, args.tags)
    names = {"body": "body", **({"tags": "tags"} if args.tags else {})}
    items: list[Any] = spark_rows(batches) if args.rows else batches
    best = float("inf")
    for _ in range(args.repeats):
        seconds, client, stored = run_once(items, names, args.batch_max_bytes)
        if stored != args.messages:
            raise RuntimeError(f"stored {stored} of {args.messages}")
        best = min(best, seconds)
        print(
            f"{seconds:.3f} s CPU, {seconds / args.messages * US_PER_SECOND:.2f} us/msg, "
            f"{client.sends} sends, {client.bytes / args.messages:.0f} B/msg"
        )
    print(f"best: {best / args.messages * US_PER_SECOND:.2f} CPU-us per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
