"""Queries that must fail: run one, time it, and hold the source to its part of the time.

A bad query (no group, a wrong secret, unreachable name servers, TLS on the wrong port) must
fail within a few request timeouts of what Spark itself takes to start the query and report a
source's error; ``Overhead`` measures Spark's part, ``fail_query`` the source's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.constants import QUERY_TIMEOUT_S
from rocketmq_spark.model import MS_PER_SECOND

# Queries that must fail at once: the request timeout they run with, and what a failing query
# may add to Spark's own time, three request timeouts.
FAIL_FAST_TIMEOUT_MS = 3000
FAIL_FAST_LIMIT_S = 3 * FAIL_FAST_TIMEOUT_MS / MS_PER_SECOND
# Runs of a query that must fail at once, when the first is over the limit (fail_query says why).
FAIL_FAST_ATTEMPTS = 2


class Overhead:
    """What Spark itself takes to start a stream or plan a batch read and report a source error
    that costs no waiting: on a loaded machine, seconds, and more while other work shares the
    cores. Measured again right before each check it is compared with, so that both runs meet the
    same load; the tests hold the source to its part."""

    def __init__(self, spark: Any, name_server: str, scratch: Callable[[], Path]) -> None:
        """``name_server`` is never reached; ``scratch`` gives a fresh directory for each
        stream's checkpoint."""
        self.spark = spark
        # Refused by the source at Spark's first call: a stream without a group, a batch read
        # with a schema of its own.
        self.options = {"nameServer": name_server, "topic": "orders"}
        self.scratch = scratch

    def stream_s(self) -> float:
        seconds, error = fail_stream(self.spark, self.options, self.scratch())
        assert "option 'consumerGroup': is required for streams" in error, error
        return seconds

    def batch_s(self) -> float:
        seconds, error = fail_batch(self.spark, self.options, schema="x INT")
        assert "option 'schema'" in error, error
        return seconds


def fail_stream(spark: Any, options: dict[str, str], checkpoint: Path) -> tuple[float, str]:
    """Start a stream and return how long until it failed, and its error."""
    reader = spark.readStream.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    began = time.monotonic()
    query = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    try:
        query.awaitTermination(QUERY_TIMEOUT_S)  # raises the query's error
    except Exception as error:  # noqa: BLE001 - Spark wraps the source's error in its own
        return time.monotonic() - began, str(error)
    finally:
        query.stop()
    raise AssertionError("the query did not fail")


def fail_batch(spark: Any, options: dict[str, str], schema: str | None = None) -> tuple[float, str]:
    """Plan and run a batch read and return how long until it failed, and its error."""
    reader = spark.read.format("rocketmq") if schema is None else spark.read.format("rocketmq").schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    began = time.monotonic()
    try:
        df.count()
    except Exception as error:  # noqa: BLE001 - Spark wraps the source's error in its own
        return time.monotonic() - began, str(error)
    raise AssertionError("the batch read did not fail")


def fail_query(
    kind: str, spark: Any, options: dict[str, str], checkpoint: Path, overhead: Overhead, label: str
) -> tuple[float, str]:
    """Start a ``stream`` or plan a ``batch`` read that fails; print how long that took, and
    return how much longer than Spark alone, and the error.

    A run over ``FAIL_FAST_LIMIT_S`` is tried once more and the quicker counts: a machine whose
    cores other work takes for a few seconds (CI runs two lanes of tests side by side) can slow
    one run's requests past their timeout, while a source that waits or retries where it should
    fail is slow on every run."""
    runs: list[tuple[float, str]] = []
    for attempt in range(FAIL_FAST_ATTEMPTS):
        if kind == "stream":
            spark_s = overhead.stream_s()
            elapsed, error = fail_stream(spark, options, checkpoint / f"attempt-{attempt}")
        else:
            spark_s = overhead.batch_s()
            elapsed, error = fail_batch(spark, options)
        print(f"{kind}, {label}: failed after {elapsed:.1f} s, {elapsed - spark_s:.1f} s more than Spark alone")
        runs.append((elapsed - spark_s, error))
        if runs[-1][0] < FAIL_FAST_LIMIT_S:
            break
    return min(runs, key=lambda run: run[0])
