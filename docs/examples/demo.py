"""The main job, end to end: orders flow into RocketMQ, a Spark stream reads the paid ones.

Run it with the interpreter that has the package (``pip install "rocketmq-spark[spark]"``),
against a running RocketMQ (``docker compose up``, or ``make cluster-start`` in a checkout)::

    python docs/examples/demo.py --name-server 127.0.0.1:9876

The name server is ``--name-server``, else the environment variable ``ROCKETMQ_NAMESRV``, else
127.0.0.1:9876. ``make demo`` starts RocketMQ, runs this and stops it again.

It creates a topic of its own (4 queues on every broker) and sends an order stream under three
tags (``created``, ``paid``, ``refunded``) with ``demo_client.py`` beside it, a small client of
RocketMQ's protocol: the source only reads. A streaming query reads only the ``paid`` orders.
Each micro-batch is written to parquet (one directory per batch id, overwritten on replay, so
the output is exactly-once with the checkpoint) and its revenue per region is added to running
totals printed on the console. A second wave of orders arrives while the query runs. At the end
it prints the consumer group's committed offsets and lag per queue, as the brokers hold them
(``mqadmin consumerProgress -g <group>`` shows the same).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from demo_client import DemoClient, Queue

DEFAULT_NAME_SERVER = "127.0.0.1:9876"
NAME_SERVER_ENV = "ROCKETMQ_NAMESRV"
TAGS = ("created", "paid", "refunded")
PAID = "paid"
QUEUES_PER_BROKER = 4
FIRST_WAVE = 3_000
SECOND_WAVE = 1_500
TRIGGER_S = 2
TRIGGER = f"{TRIGGER_S} seconds"
WAIT_S = 180
SECOND_WAVE_AFTER_S = 5
ORDER_BODY = '{{"orderId": {i}, "customer": "c-{i}"}}'
REGIONS = ("north", "south", "east", "west")


def produce(client: DemoClient, queues: list[Queue], topic: str, count: int, wave: int) -> None:
    """``count`` orders, spread over the queues; the tags go round, so every third order is paid."""
    for i in range(count):
        client.send(
            queues[i % len(queues)],
            topic,
            ORDER_BODY.format(i=i).encode(),
            TAGS[i % len(TAGS)],
            f"order-{wave}-{i}",
            {"wave": str(wave)},
        )


def expected_paid() -> int:
    return sum(1 for wave in (FIRST_WAVE, SECOND_WAVE) for i in range(wave) if TAGS[i % len(TAGS)] == PAID)


def local_session() -> Any:
    """A local session whose Python workers run this interpreter, the one with the package."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("rocketmq-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )


def run(name_server: str, work: Path, topic: str, group: str) -> int:
    """The demo; 0 when the sink holds every paid order."""
    from pyspark.sql import functions as F

    client = DemoClient(name_server)
    try:
        queues = client.create_topic(topic, QUEUES_PER_BROKER)
        print(
            f"topic {topic} on {', '.join(client.masters)}; producing {FIRST_WAVE} orders tagged {','.join(TAGS)} ...",
            flush=True,
        )
        produce(client, queues, topic, FIRST_WAVE, 1)

        spark = local_session()
        spark.sparkContext.setLogLevel("ERROR")
        orders = (
            spark.readStream.format("rocketmq")
            .option("nameServer", name_server)
            .option("topic", topic)
            .option("consumerGroup", group)
            .option("subExpression", PAID)
            .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
            .option("maxMessagesPerTrigger", "2000")
            .load()
        )
        paid = (
            orders.select(
                F.get_json_object(F.col("body").cast("string"), "$.orderId").cast("int").alias("orderId"),
                "keys",
                "tags",
                "brokerName",
                "queueId",
                "queueOffset",
                "storeTimestamp",
            )
            .withColumn("region", F.element_at(F.array(*map(F.lit, REGIONS)), F.col("orderId") % 4 + 1))
            .withColumn("amount", (F.col("orderId") * 37 % 500) / 10)
        )
        totals: dict[str, float] = {}
        written = [0]

        def write_batch(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(work / "paid-orders" / f"batch_id={batch_id}"))
            rows = batch.count()
            for row in batch.groupBy("region").agg(F.sum("amount").alias("revenue")).collect():
                totals[row.region] = totals.get(row.region, 0.0) + row.revenue
            written[0] += rows
            print(
                f"batch {batch_id}: {rows} paid orders; revenue so far "
                + ", ".join(f"{region}={totals[region]:.1f}" for region in sorted(totals)),
                flush=True,
            )

        query = (
            paid.writeStream.foreachBatch(write_batch)
            .trigger(processingTime=TRIGGER)
            .option("checkpointLocation", str(work / "checkpoint"))
            .start()
        )
        expected = expected_paid()
        try:
            time.sleep(SECOND_WAVE_AFTER_S)
            print(f"producing a second wave of {SECOND_WAVE} orders while the query runs ...", flush=True)
            produce(client, queues, topic, SECOND_WAVE, 2)
            deadline = time.monotonic() + WAIT_S
            while written[0] < expected and time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                time.sleep(1)
            time.sleep(2 * TRIGGER_S)  # another trigger, so the last batch's offsets reach the broker
        finally:
            query.stop()
        sink = spark.read.parquet(str(work / "paid-orders"))
        total, distinct = sink.count(), sink.select("keys").distinct().count()
        print(f"\nparquet sink: {total} paid orders ({distinct} distinct), expected {expected}")
        spark.stop()

        print(f"\ncommitted offsets of group {group}, as the brokers hold them:")
        print(f"{'broker':<10}{'queue':>6}{'committed':>11}{'max':>8}{'lag':>6}")
        for queue, committed, high in client.offsets(queues, topic, group):
            print(f"{queue.broker:<10}{queue.queue_id:>6}{committed!s:>11}{high:>8}{high - (committed or 0):>6}")
    finally:
        client.close()
    return 0 if total == distinct == expected else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--name-server",
        default=os.environ.get(NAME_SERVER_ENV, DEFAULT_NAME_SERVER),
        help=f"host:port[;host:port], default ${NAME_SERVER_ENV} or {DEFAULT_NAME_SERVER}",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the sink and checkpoint go (kept); default a temporary directory (removed)",
    )
    args = parser.parse_args()
    run_id = uuid.uuid4().hex[:8]  # a topic and a group of its own, so that every run starts afresh
    work = args.workdir or Path(tempfile.mkdtemp(prefix="rocketmq-demo-"))
    try:
        return run(args.name_server, work, f"demo-orders-{run_id}", f"revenue-by-region-{run_id}")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
