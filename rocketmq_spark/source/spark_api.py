"""What differs between the PySpark 4 lines, in one place: the rest of the source is written
against the newest stream API and never asks which PySpark it runs on.

PySpark 4.2 added admission control to Python stream readers: ``latestOffset(start, limit)``,
``getDefaultReadLimit``, ``reportLatestOffset`` and ``SupportsTriggerAvailableNow``, in the
module ``pyspark.sql.streaming.datasource``. On 4.0 and 4.1 that module does not exist and Spark
calls ``latestOffset()`` with no argument. Measured there (``docs/offsets.md``), per query:

- a new query: ``latestOffset()``, then ``initialOffset()``, then ``partitions(initial, end)``;
- each later trigger: ``latestOffset()``, ``commit(previous end)`` if a batch follows, then
  ``partitions(start, end)``; batches run one after another, so when ``latestOffset()`` comes,
  every batch planned before it is in Spark's commit log;
- a restart on a checkpoint: ``partitions(last, last)`` with the offset log's last end (Spark's
  ``setLatestSeenOffset``), then ``partitions(start, end)`` again if that batch never committed;
- ``Trigger.AvailableNow`` is Spark's single-batch fallback: one ``latestOffset()``, one batch,
  and the planner process ends with neither ``commit`` nor ``stop``.

So on 4.0 and 4.1 the source is wrapped in ``PlainStreamReader``, which knows where the next
batch starts (the end of the last batch Spark planned, else the initial offsets) and hands the
source its own read limit, as Spark 4.2 would.

PySpark 4.1 added filter pushdown to batch readers: ``DataSourceReader.pushFilters`` and the
filter classes of ``pyspark.sql.datasource``. Spark calls it only when the session conf
``spark.sql.python.filterPushdown.enabled`` is true, and that is false by default on 4.1, 4.2 and
4.3 (read from each line's session); worse, while it is false, planning a read whose reader
overrides ``pushFilters`` fails (``DATA_SOURCE_PUSHDOWN_DISABLED``,
``pyspark/sql/worker/plan_data_source_read.py``, 4.1 to 4.3). The source cannot see the conf, so
the reader that pushes is used only when the user asks for it (the ``filterPushdown`` option);
on 4.0 the filter classes are stand-ins that Spark never makes, and the plain reader is used.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

log = logging.getLogger(__name__)


try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # PySpark 4.0 and 4.1: the source's own, with 4.2's names and fields
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """PySpark 4.2's read limits, for the source's own use on 4.0 and 4.1."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow(ABC):  # type: ignore[no-redef]
        @abstractmethod
        def prepareForTriggerAvailableNow(self) -> None: ...


try:
    from pyspark.sql.datasource import (
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    FILTER_PUSHDOWN = True
except ImportError:  # PySpark 4.0, which never pushes a filter: stand-ins of 4.1's classes
    FILTER_PUSHDOWN = False

    @dataclass(frozen=True)
    class Filter:  # type: ignore[no-redef]
        attribute: tuple[str, ...]
        value: Any

    class EqualTo(Filter): ...  # type: ignore[no-redef]

    class GreaterThan(Filter): ...  # type: ignore[no-redef]

    class GreaterThanOrEqual(Filter): ...  # type: ignore[no-redef]

    class LessThan(Filter): ...  # type: ignore[no-redef]

    class LessThanOrEqual(Filter): ...  # type: ignore[no-redef]

    class In(Filter): ...  # type: ignore[no-redef]


# Spark's comparison filters, as where they put a bound on their column: (lower bound?, inclusive?).
BOUNDS: dict[type, tuple[bool, bool]] = {
    GreaterThan: (True, False),
    GreaterThanOrEqual: (True, True),
    LessThan: (False, False),
    LessThanOrEqual: (False, True),
}

# The session conf without which Spark 4.1+ pushes no filter to a Python source (default false).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = [
    "ADMISSION_CONTROL",
    "BOUNDS",
    "FILTER_PUSHDOWN",
    "FILTER_PUSHDOWN_CONF",
    "AdmissionControlled",
    "EqualTo",
    "Filter",
    "GreaterThan",
    "GreaterThanOrEqual",
    "In",
    "LessThan",
    "LessThanOrEqual",
    "PlainStreamReader",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "ReadMinRows",
    "SupportsTriggerAvailableNow",
    "batch_reader_class",
    "for_this_spark",
]


class AdmissionControlled(Protocol):
    """A stream reader in the shape of PySpark 4.2's API, which ``PlainStreamReader`` drives."""

    def initialOffset(self) -> dict[str, Any]: ...
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]: ...
    def getDefaultReadLimit(self) -> ReadLimit: ...
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]: ...
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]: ...
    def commit(self, end: dict[str, Any]) -> None: ...
    def stop(self) -> None: ...


class PlainStreamReader(DataSourceStreamReader):
    """The stream API of PySpark 4.0 and 4.1 over a reader written for 4.2's.

    ``latestOffset()`` becomes ``latestOffset(start, default limit)``: ``start`` is where the next
    batch begins, which Spark no longer says. It is the end of the last batch Spark planned
    (``partitions``), or, before any, the initial offsets, which a new query asks for only after
    its first ``latestOffset()`` and which are therefore computed once and kept.
    """

    def __init__(self, source: AdmissionControlled, notice: str | None = None) -> None:
        self.source = source
        self._initial: dict[str, Any] | None = None
        self._next_start: dict[str, Any] | None = None
        self._notice = notice  # said once, at the query's first call

    def _started(self) -> None:
        if self._notice:
            log.warning(self._notice)
            self._notice = None

    def initialOffset(self) -> dict[str, Any]:
        self._started()
        if self._initial is None:
            self._initial = self.source.initialOffset()
        return self._initial

    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]  # 4.0/4.1 take no argument
        self._started()
        start = self._next_start if self._next_start is not None else self.initialOffset()
        return self.source.latestOffset(start, self.source.getDefaultReadLimit())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._started()
        self._next_start = end
        if start == end:  # Spark telling a restarted reader where its query stands
            return []
        return self.source.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.source.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.source.commit(end)

    def stop(self) -> None:
        self.source.stop()


def single_batch_notice(stores: bool, limited: bool) -> str:
    """What an AvailableNow run does differently on this PySpark, said once at a query's start."""
    notice = (
        f"PySpark {pyspark.__version__} runs Trigger.AvailableNow on a Python source as one micro-batch "
        "(4.2 and later run it in as many batches as the limits ask)"
    )
    if stores:
        notice += (
            "; Spark ends that run without telling the source, so the group's offsets on the broker reach "
            "the batch's end when the next run on the checkpoint plans its first batch"
        )
    if limited:
        notice += (
            "; maxMessagesPerTrigger and minMessagesPerTrigger apply to that batch as to any trigger, so such "
            "a run reads at most maxMessagesPerTrigger messages, or none below minMessagesPerTrigger"
        )
    return notice


R = TypeVar("R")


def batch_reader_class(pushdown: bool, plain: type[R], pushing: type[R]) -> type[R]:
    """The batch reader class for this PySpark: the one that overrides ``pushFilters`` only when
    the user asked for pushdown (which then needs the conf on) and this PySpark has it."""
    if pushdown and not FILTER_PUSHDOWN:
        log.info(
            "PySpark %s pushes no filters to Python sources (4.1 and later do): filterPushdown has no effect; "
            "Spark filters the rows",
            pyspark.__version__,
        )
    return pushing if pushdown and FILTER_PUSHDOWN else plain


def for_this_spark(reader: Any, stores: bool = False, limited: bool = False) -> DataSourceStreamReader:
    """The reader as this PySpark calls it: as it is on 4.2+, wrapped on 4.0 and 4.1.

    ``stores`` (the query stores offsets) and ``limited`` (it sets a per-trigger limit) say
    whether the single-batch AvailableNow of 4.0 and 4.1 changes anything the user sees."""
    if ADMISSION_CONTROL:
        return reader  # type: ignore[no-any-return]
    notice = single_batch_notice(stores, limited) if stores or limited else None
    return PlainStreamReader(reader, notice)
