"""p: one window of the data set by storeTimestamp, read by ``spark.read`` into the ``noop`` sink
with filter pushdown and without it, to show what pushdown saves on a selective query.

The window covers about the middle tenth of the messages: its ends are quantiles of the store
times, found by one read of the ``storeTimestamp`` column before the timed runs. With pushdown
(the ``filterPushdown`` option and Spark's session conf, set for these queries only) the source
starts and ends each queue at the first offsets stored at the window's ends and Spark checks the
rows again; without it the source reads the whole topic and Spark keeps the window. Both must
return the same rows. The rows pulled with pushdown are the planned ranges, from the same
``pushFilters`` and ``partitions()`` calls Spark makes, made in this process.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from common import log
from dataset import planned_rows
from readers import batch_frame, timed_noop

STORE_TIMESTAMP = "storeTimestamp"
# The window: the store times between these quantiles of the data set's, about 10% of it.
WINDOW_FROM_QUANTILE = 0.45
WINDOW_UNTIL_QUANTILE = 0.55
# percentile_approx's accuracy: the quantiles are off by at most 1/accuracy of the rows.
QUANTILE_ACCURACY = 100_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TRUE, FALSE = "true", "false"


@dataclass(frozen=True)
class Window:
    """Store times from ``start`` to ``end``, both included (``between``), as UTC datetimes: a
    zoned time is what Spark hands a Python source for a timestamp and what it can push."""

    start: datetime
    end: datetime


@dataclass
class Runs:
    """One way of reading the window: its rows and seconds, run by run."""

    rows: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def choose_window(spark: Any, options: dict[str, str]) -> Window:
    """The middle tenth of the data set by store time, from one read of its storeTimestamp column."""
    from pyspark.sql import functions as F

    df = batch_frame(spark, options, schema=f"{STORE_TIMESTAMP} timestamp")
    millis = F.unix_millis(STORE_TIMESTAMP)
    low, high = df.select(
        F.percentile_approx(millis, [WINDOW_FROM_QUANTILE, WINDOW_UNTIL_QUANTILE], QUANTILE_ACCURACY)
    ).first()[0]
    return Window(EPOCH + timedelta(milliseconds=low), EPOCH + timedelta(milliseconds=high))


def run_window(spark: Any, options: dict[str, str], window: Window, pushdown: bool) -> tuple[int, float]:
    """The window to noop on a freshly loaded DataFrame (Spark keeps a loaded DataFrame's planned
    read across queries): (rows returned, seconds of the action)."""
    from pyspark.sql import functions as F

    from rocketmq_spark.source.option_model import FILTER_PUSHDOWN
    from rocketmq_spark.source.spark_api import FILTER_PUSHDOWN_CONF

    if pushdown:
        spark.conf.set(FILTER_PUSHDOWN_CONF, TRUE)
    try:
        df = batch_frame(spark, {**options, FILTER_PUSHDOWN: TRUE if pushdown else FALSE})
        return timed_noop(df.where(F.col(STORE_TIMESTAMP).between(window.start, window.end)))
    finally:
        if pushdown:
            spark.conf.unset(FILTER_PUSHDOWN_CONF)


def pulled_with_pushdown(options: dict[str, str], window: Window) -> tuple[int, int]:
    """Rows the pushed read plans to pull and its partitions: the reader Spark uses, given the
    filters Spark makes of ``between``, planned here."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThanOrEqual

    from rocketmq_spark.source.batch_reader import PushingBatchReader
    from rocketmq_spark.source.option_model import FILTER_PUSHDOWN, ReadKind
    from rocketmq_spark.source.options import parse_options

    reader = PushingBatchReader(parse_options({**options, FILTER_PUSHDOWN: TRUE}, kind=ReadKind.BATCH))
    reader.pushFilters(
        [GreaterThanOrEqual((STORE_TIMESTAMP,), window.start), LessThanOrEqual((STORE_TIMESTAMP,), window.end)]
    )
    parts = list(reader.partitions())
    return planned_rows(parts), len(parts)


class PushdownCase:
    """The window chosen once, then each repeat reads it with and without pushdown."""

    def __init__(self, spark: Any, options: dict[str, str], topic_rows: int) -> None:
        self.spark = spark
        self.options = options
        self.topic_rows = topic_rows
        self.window = choose_window(spark, options)
        self.pushed = Runs()
        self.plain = Runs()
        log(f"p: window {_iso(self.window.start)} .. {_iso(self.window.end)}")

    def run_once(self) -> tuple[float, float]:
        """One read with pushdown, one without; their seconds. Rows must agree run by run."""
        for runs, pushdown in ((self.pushed, True), (self.plain, False)):
            rows, seconds = run_window(self.spark, self.options, self.window, pushdown)
            runs.rows.append(rows)
            runs.seconds.append(seconds)
        if self.pushed.rows[-1] != self.plain.rows[-1]:
            raise RuntimeError(
                f"the window returned {self.pushed.rows[-1]} rows with pushdown and {self.plain.rows[-1]} without"
            )
        return self.pushed.seconds[-1], self.plain.seconds[-1]

    def report(self) -> dict[str, Any]:
        rows = self.plain.rows[0]
        if any(n != rows for n in self.pushed.rows + self.plain.rows):
            raise RuntimeError(
                f"the window's rows changed from run to run: with pushdown {self.pushed.rows}, "
                f"without {self.plain.rows}"
            )
        pulled, partitions = pulled_with_pushdown(self.options, self.window)
        if pulled < rows:
            raise RuntimeError(f"pushdown plans {pulled} rows, fewer than the {rows} the window returns")
        with_s, without_s = statistics.median(self.pushed.seconds), statistics.median(self.plain.seconds)
        return {
            "window": {
                "from": _iso(self.window.start),
                "until": _iso(self.window.end),
                "rows": rows,
                "topic_rows": self.topic_rows,
            },
            "with": {
                "rows_returned": rows,
                "rows_pulled": pulled,
                "pulled_from": f"planned ranges, {partitions} partition{'' if partitions == 1 else 's'}",
                "median_seconds": round(with_s, 2),
                "runs_seconds": [round(s, 2) for s in self.pushed.seconds],
            },
            "without": {
                "rows_returned": rows,
                "rows_pulled": self.topic_rows,
                "pulled_from": "the whole topic",
                "median_seconds": round(without_s, 2),
                "runs_seconds": [round(s, 2) for s in self.plain.seconds],
            },
            "speedup": round(without_s / with_s, 2),
            "pulled_share": round(pulled / self.topic_rows, 4),
        }


def _iso(moment: datetime) -> str:
    """A store time as the broker keeps it: to the millisecond."""
    return moment.isoformat(timespec="milliseconds")
