# Databricks notebook source
# MAGIC %md
# MAGIC # RocketMQ into Delta with rocketmq-spark
# MAGIC
# MAGIC Reads a RocketMQ topic as a stream for a consumer group and writes it to a Delta table on
# MAGIC cloud storage. Each run with `Trigger.AvailableNow` reads everything the group has not
# MAGIC read yet and stops: schedule it as a job for a backfill or an hourly catch-up, or set the
# MAGIC `trigger` widget to an interval such as `1 minute` to keep it running. The last cell shows
# MAGIC the group's lag.
# MAGIC
# MAGIC * **Compute**: a Databricks Runtime on Apache Spark 4.0 or later (17.3 LTS and later);
# MAGIC   classic (single user or shared) clusters and serverless alike. On 17.3 LTS and 18 LTS an
# MAGIC   `availableNow` run is one batch, and the group's offsets on the broker reach its end when
# MAGIC   the next run starts (see docs/spark-versions.md). The executors must reach the brokers at the
# MAGIC   addresses the name server gives out, or point `name_server` at a RocketMQ 5 proxy's
# MAGIC   remoting port.
# MAGIC * **Secrets**: with ACL on, put the key and secret in a secret scope
# MAGIC   (`databricks secrets put-secret rocketmq access-key`, and `secret-key`) and name the scope
# MAGIC   in the `secret_scope` widget; leave it empty when the brokers run without ACL.
# MAGIC * **Paths**: `checkpoint` and `output` on cloud storage or a Unity Catalog volume
# MAGIC   (`s3://`, `abfss://`, `gs://`, `/Volumes/...`). One checkpoint per query, never shared.
# MAGIC
# MAGIC The same file runs as a plain Python script against any Spark Connect server, with the
# MAGIC settings as command-line options (`--help` lists them) or `ROCKETMQ_<SETTING>` environment
# MAGIC variables, and the keys in `ROCKETMQ_ACCESS_KEY` and `ROCKETMQ_SECRET_KEY`.

# COMMAND ----------

# MAGIC %pip install rocketmq-spark

# COMMAND ----------

# MAGIC %md
# MAGIC The package does not require PySpark, so pip leaves the runtime's own Spark as it is and
# MAGIC adds only what the source needs besides (pyarrow, lz4, zstandard). To install once for
# MAGIC every notebook on a cluster instead, add `rocketmq-spark` (or the built wheel) as a cluster library: see
# MAGIC docs/operations.md.

# COMMAND ----------

import argparse
import json
import os
from typing import Any

ON_DATABRICKS = "dbutils" in globals()
LOCAL_CONNECT = "sc://localhost:15002"
KEY_NAMES = {"accessKey": "access-key", "secretKey": "secret-key"}  # option -> secret (or env) name
AVAILABLE_NOW = "availableNow"

# setting -> (default on Databricks, default elsewhere or None where it has no meaning, what it is)
SETTINGS: dict[str, tuple[str, str | None, str]] = {
    "name_server": ("namesrv-1.example.internal:9876", "127.0.0.1:9876", "name servers, host:port;host:port"),
    "topic": ("orders", "orders", "topic to read (several: comma-separated)"),
    "consumer_group": ("orders-to-delta", "orders-to-delta", "group whose offsets the stream stores"),
    "start_from": (
        "CONSUME_FROM_FIRST_OFFSET",
        "CONSUME_FROM_FIRST_OFFSET",
        "consumeFromWhere, for queues where the group has no stored offset",
    ),
    "max_per_trigger": ("100000", "100000", "maxMessagesPerTrigger"),
    "trigger": (AVAILABLE_NOW, AVAILABLE_NOW, f"{AVAILABLE_NOW}, or an interval such as '1 minute'"),
    "checkpoint": (
        "s3://my-bucket/checkpoints/rocketmq/orders",
        "rocketmq-notebook/checkpoint",
        "the query's checkpoint directory",
    ),
    "output": ("s3://my-bucket/tables/rocketmq/orders", "rocketmq-notebook/orders", "where the rows go"),
    "sink_format": ("delta", "parquet", "delta or parquet"),
    "secret_scope": ("", None, "secret scope holding access-key and secret-key; empty: no ACL"),
}


def read_settings() -> dict[str, str]:
    """Widgets on Databricks (jobs pass them as parameters); elsewhere command-line options, whose
    defaults come from ROCKETMQ_<SETTING> environment variables when set."""
    if ON_DATABRICKS:
        for name, (default, _, label) in SETTINGS.items():
            dbutils.widgets.text(name, default, label)  # noqa: F821 - a Databricks notebook global
        return {name: dbutils.widgets.get(name) for name in SETTINGS}  # noqa: F821
    parser = argparse.ArgumentParser(
        description="RocketMQ into parquet or Delta over Spark Connect",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--remote",
        default=os.environ.get("SPARK_REMOTE", LOCAL_CONNECT),
        help="Spark Connect URL ($SPARK_REMOTE if set)",
    )
    for name, (_, default, label) in SETTINGS.items():
        if default is not None:
            parser.add_argument(
                f"--{name.replace('_', '-')}", help=label, default=os.environ.get(f"ROCKETMQ_{name.upper()}", default)
            )
    parser.add_argument(
        "--until-caught-up",
        action="store_true",
        help="with an interval trigger, stop once what the queues held is read, instead of running until interrupted",
    )
    return vars(parser.parse_args())


def credentials(settings: dict[str, str]) -> dict[str, str]:
    """ACL keys from the secret scope on Databricks, from the environment elsewhere; none if unset."""
    if ON_DATABRICKS:
        scope = settings["secret_scope"]
        if not scope:
            return {}
        return {
            option: dbutils.secrets.get(scope=scope, key=name)  # noqa: F821
            for option, name in KEY_NAMES.items()
        }
    keys = {
        option: os.environ.get(f"ROCKETMQ_{name.replace('-', '_').upper()}", "") for option, name in KEY_NAMES.items()
    }
    if any(keys.values()) and not all(keys.values()):
        raise SystemExit("set both ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY, or neither")
    return keys if all(keys.values()) else {}


settings = read_settings()
if not ON_DATABRICKS:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(settings["remote"]).getOrCreate()

# COMMAND ----------

# MAGIC %md
# MAGIC A session that was running before the install has not looked for data sources, so
# MAGIC register the source once. Over Spark Connect (serverless, shared clusters) this sends the
# MAGIC class to the server, whose Python workers import it from the installed package.

# COMMAND ----------

from rocketmq_spark import RocketMQDataSource  # noqa: E402 - a cell of its own, after the install

spark.dataSource.register(RocketMQDataSource)

# COMMAND ----------

orders = (
    spark.readStream.format("rocketmq")
    .option("nameServer", settings["name_server"])
    .option("topic", settings["topic"])
    .option("consumerGroup", settings["consumer_group"])
    .option("consumeFromWhere", settings["start_from"])
    .option("maxMessagesPerTrigger", settings["max_per_trigger"])
    .options(**credentials(settings))
    .load()
)

rows = orders.selectExpr(
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "tags",
    "keys",
    "CAST(body AS STRING) AS body",
    "properties",
    "bornTimestamp",
    "storeTimestamp",
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Run
# MAGIC
# MAGIC The checkpoint records which offsets each micro-batch read, so a failed or repeated run
# MAGIC writes every message to the table once. After each batch the source also stores the
# MAGIC group's offsets on the broker, for monitoring: a run that stops has stored exactly where
# MAGIC it ended. To write to a Unity Catalog table, use `.toTable("catalog.schema.table")`
# MAGIC instead of `.start(path)`.

# COMMAND ----------

writer = rows.writeStream.format(settings["sink_format"]).option("checkpointLocation", settings["checkpoint"])
if settings["trigger"] == AVAILABLE_NOW:
    writer = writer.trigger(availableNow=True)
else:
    writer = writer.trigger(processingTime=settings["trigger"])
query = writer.start(settings["output"])

if settings["trigger"] == AVAILABLE_NOW:
    query.awaitTermination()
    print("caught up to where the queues ended when the run started")
elif settings.get("until_caught_up"):
    query.processAllAvailable()
    print("caught up to where the queues end")
elif not ON_DATABRICKS:
    # A notebook leaves a running stream be; a script waits for it (until interrupted).
    query.awaitTermination()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Lag
# MAGIC
# MAGIC * From the query: each progress report carries, per queue, where the last batch ended
# MAGIC   (`endOffset`) and the queue's end when it was planned (`latestOffset`); the cell below
# MAGIC   prints the difference. On a classic cluster the same reports feed the streaming
# MAGIC   dashboard under the cell that started the query and the Spark UI's Structured Streaming
# MAGIC   tab; on serverless, read them here or from `query.recentProgress`.
# MAGIC * From RocketMQ, like any consumer group's (the dashboard, or
# MAGIC   `mqadmin consumerProgress -n <name server> -g <group> -t <topic>`): the offsets stored
# MAGIC   after each batch, at most one trigger behind the table.

# COMMAND ----------


def offsets(value: Any) -> dict[str, Any]:
    """A report's offsets: an object in its JSON, or JSON text again (over Spark Connect)."""
    return (json.loads(value) if isinstance(value, str) else value) or {}


def lag_per_queue(progress: Any) -> dict[str, int]:
    """Messages behind per queue, from one progress report (its first and only source)."""
    # From the report's JSON: its own fields are Python's notation, not JSON, on PySpark 4.0/4.1.
    source = json.loads(progress.json)["sources"][0]
    end, latest = offsets(source["endOffset"]), offsets(source["latestOffset"])
    return {
        f"{topic}/{broker}/{queue}": max(0, offset - end.get(topic, {}).get(broker, {}).get(queue, 0))
        for topic, brokers in latest.items()
        for broker, queues in brokers.items()
        for queue, offset in queues.items()
    }


progress = query.lastProgress
if progress is None:
    print("no batch has run yet")
else:
    lag = lag_per_queue(progress)
    for queue, behind in sorted(lag.items()):
        print(f"{queue:<50} {behind:>10}")
    print(f"lag: {sum(lag.values())} messages behind on {len(lag)} queues")

# COMMAND ----------

if query.isActive:
    # With an interval trigger the first batch may not have written the table yet.
    query.processAllAvailable()
table = spark.read.format(settings["sink_format"]).load(settings["output"])
print(f"{settings['output']} holds {table.count()} rows")

if not ON_DATABRICKS:
    query.stop()
    spark.stop()
