"""The writes ``sparkjobs.py drive`` (drivejobs.py) runs for the tests of each PySpark line: the
rocketmq sink in batch, and as a stream's sink; and which of the adapter's branches the installed
package took on the line. Only the standard library and PySpark, as sparkjobs.py: it is loaded by
path from that file's folder in a virtualenv that holds the built wheel.

Each takes the session first and answers with a JSON-ready dict, as ``Driven``'s requests do.
"""

from __future__ import annotations

from typing import Any


def write_rows(spark: Any, options: dict[str, str], rows: int, columns: list[str], partitions: int) -> dict[str, Any]:
    """A batch write of ``rows`` rows of ``spark.range`` made into ``columns`` (SQL expressions
    over ``id``), in ``partitions`` tasks; what Spark says it wrote is not asked (it says nothing)."""
    writer = spark.range(rows).selectExpr(*columns).repartition(partitions).write.format("rocketmq").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()
    return {}


def copy_available_now(
    spark: Any, source: dict[str, str], sink: dict[str, str], checkpoint: str, columns: list[str], timeout_s: float
) -> dict[str, Any]:
    """An AvailableNow stream from the rocketmq source into the rocketmq sink, ``columns`` (SQL
    expressions over the source's columns) in between; the rows each trigger read."""
    read = spark.readStream.format("rocketmq")
    for key, value in source.items():
        read = read.option(key, value)
    write = read.load().selectExpr(*columns).writeStream.format("rocketmq")
    for key, value in sink.items():
        write = write.option(key, value)
    query = write.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise TimeoutError(f"the stream into the rocketmq sink did not finish in {timeout_s}s")
    return {"rows": [p.numInputRows for p in query.recentProgress]}


def branches(spark: Any) -> dict[str, Any]:
    """What the installed package's adapters chose on this line (source/spark_api.py and
    sink/spark_api.py): the scenarios each line runs are picked by these."""
    from rocketmq_spark.sink.spark_api import ARROW_STREAM_WRITER
    from rocketmq_spark.source.spark_api import ADMISSION_CONTROL, FILTER_PUSHDOWN

    return {
        "spark": spark.version,
        "admission_control": ADMISSION_CONTROL,
        "filter_pushdown": FILTER_PUSHDOWN,
        "arrow_stream_writer": ARROW_STREAM_WRITER,
    }


SINK_OPS = {"write_rows": write_rows, "copy_available_now": copy_available_now, "branches": branches}
