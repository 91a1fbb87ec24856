"""Stream a RocketMQ topic into parquet for a consumer group, with spark-submit.

    spark-submit stream_to_parquet.py --name-server 127.0.0.1:9876 --topic orders \
        --group orders-to-parquet --out /data/orders/stream --checkpoint /data/checkpoints/orders

It runs until stopped, a micro-batch every --trigger; with --available-now it reads what the
group has not read yet and stops, a catch-up to schedule as a job. Started again on the same
--checkpoint it goes on where it stopped: the file sink and the checkpoint make the output
exactly-once, and after each batch the group's offsets are stored on the brokers, so mqadmin
consumerProgress shows its lag. Needs the package on the driver and the executors: see the
cluster recipe in docs/operations.md (a virtualenv packed and shipped with --archives).
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

DEFAULT_TRIGGER = "10 seconds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name-server", required=True, help="host:port[;host:port]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True, help="the consumer group its offsets are stored for")
    parser.add_argument("--out", required=True, help="the parquet directory")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--trigger", default=DEFAULT_TRIGGER, help="the interval between micro-batches")
    parser.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    args = parser.parse_args()

    spark = SparkSession.builder.appName(f"rocketmq-stream-{args.topic}").getOrCreate()
    messages = (
        spark.readStream.format("rocketmq")
        .option("nameServer", args.name_server)
        .option("topic", args.topic)
        .option("consumerGroup", args.group)
        .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")  # a new group reads what is there
        .load()
    )
    writer = (
        messages.writeStream.format("parquet").option("path", args.out).option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime=args.trigger)
    query = writer.start()
    query.awaitTermination()
    print(f"the sink holds {spark.read.parquet(args.out).count()} messages")
    spark.stop()


if __name__ == "__main__":
    main()
