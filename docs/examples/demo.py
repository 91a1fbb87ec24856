"""The main job, end to end: orders flow into RocketMQ, a Spark stream reads the paid ones.

``make demo`` runs this: it starts RocketMQ on loopback (two brokers), produces an order stream
with the official Java producer under three tags (``created``, ``paid``, ``refunded``), and runs a
streaming query that reads only ``paid`` orders. Each micro-batch is written to parquet (one
directory per batch id, overwritten on replay, so the output is exactly-once with the checkpoint)
and its revenue per region is added to running totals printed on the console. A second wave of
orders arrives while the query runs. At the end it prints the consumer group's committed offsets
and lag per queue, as the official client and RocketMQ's own mqadmin see them.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any

from integration.cluster import DEFAULT_WORKDIR, Cluster, ClusterConfig
from integration.spark import local_spark

TOPIC = "orders"
GROUP = "revenue-by-region"
TAGS = "created,paid,refunded"
QUEUES_PER_BROKER = 4
FIRST_WAVE = 3_000
SECOND_WAVE = 1_500
TRIGGER_S = 2
TRIGGER = f"{TRIGGER_S} seconds"
WAIT_S = 180
WORK = DEFAULT_WORKDIR / "demo"
ORDER_BODY = '{"orderId": {i}, "customer": "c-{i}"}'


def produce(cluster: Cluster, count: int, wave: int) -> None:
    """``count`` orders; the tags go round in TAGS order, so every third order is paid."""
    cluster.tool("produce", "--topic", TOPIC, "--count", str(count), "--tags", TAGS, "--keys", f"order-{wave}-{{i}}",
                 "--body", ORDER_BODY, "--prop", f"wave={wave}", "--batch", "50", "--quiet")


def main() -> int:
    from pyspark.sql import functions as F

    shutil.rmtree(WORK, ignore_errors=True)
    cluster = Cluster(ClusterConfig(brokers=2))
    print("starting RocketMQ (name server, broker-a, broker-b) ...", flush=True)
    cluster.start()
    try:
        cluster.tool("create-topic", "--topic", TOPIC, "--queues", str(QUEUES_PER_BROKER))
        print(f"producing {FIRST_WAVE} orders tagged {TAGS} ...", flush=True)
        produce(cluster, FIRST_WAVE, 1)

        spark = local_spark("rocketmq-demo")
        spark.sparkContext.setLogLevel("ERROR")
        orders = (spark.readStream.format("rocketmq")
                  .option("nameServer", cluster.namesrv_addr)
                  .option("topic", TOPIC)
                  .option("consumerGroup", GROUP)
                  .option("subExpression", "paid")
                  .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
                  .option("maxMessagesPerTrigger", "2000")
                  .load())
        paid = (orders
                .select(F.get_json_object(F.col("body").cast("string"), "$.orderId").cast("int").alias("orderId"),
                        "keys", "tags", "brokerName", "queueId", "queueOffset", "storeTimestamp")
                .withColumn("region", F.element_at(F.array(*map(F.lit, ("north", "south", "east", "west"))),
                                                   F.col("orderId") % 4 + 1))
                .withColumn("amount", (F.col("orderId") * 37 % 500) / 10))
        totals: dict[str, float] = {}
        written = [0]

        def write_batch(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(WORK / "paid-orders" / f"batch_id={batch_id}"))
            rows = batch.count()
            for row in batch.groupBy("region").agg(F.sum("amount").alias("revenue")).collect():
                totals[row.region] = totals.get(row.region, 0.0) + row.revenue
            written[0] += rows
            print(f"batch {batch_id}: {rows} paid orders; revenue so far "
                  + ", ".join(f"{region}={totals[region]:.1f}" for region in sorted(totals)), flush=True)

        query = (paid.writeStream.foreachBatch(write_batch).trigger(processingTime=TRIGGER)
                 .option("checkpointLocation", str(WORK / "checkpoint")).start())
        try:
            time.sleep(5)
            print(f"producing a second wave of {SECOND_WAVE} orders while the query runs ...", flush=True)
            produce(cluster, SECOND_WAVE, 2)
            expected = (sum(1 for i in range(FIRST_WAVE) if i % 3 == 1)
                        + sum(1 for i in range(SECOND_WAVE) if i % 3 == 1))
            deadline = time.monotonic() + WAIT_S
            while written[0] < expected and time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                time.sleep(1)
            time.sleep(2 * TRIGGER_S)  # another trigger, so the last batch's offsets reach the broker
        finally:
            query.stop()
        sink = spark.read.parquet(str(WORK / "paid-orders"))
        print(f"\nparquet sink: {sink.count()} paid orders ({sink.select('keys').distinct().count()} distinct), "
              f"expected {expected}")
        spark.stop()

        print(f"\ncommitted offsets of group {GROUP} (official client):")
        print(f"{'broker':<10}{'queue':>6}{'committed':>11}{'max':>8}{'lag':>6}")
        for row in cluster.tool("offsets", "--topic", TOPIC, "--group", GROUP):
            committed = row["consumerOffset"]
            lag = row["maxOffset"] - (committed or 0)
            print(f"{row['broker']:<10}{row['queueId']:>6}{committed!s:>11}{row['maxOffset']:>8}{lag:>6}")
        print("\nmqadmin consumerProgress:")
        print(cluster.mqadmin("consumerProgress", "-g", GROUP, "-t", TOPIC, check=False))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
