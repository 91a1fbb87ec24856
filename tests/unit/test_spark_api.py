"""Both shapes of PySpark's stream API, whichever line runs the tests.

PySpark 4.2+ calls the source's reader as it is; 4.0 and 4.1 call ``PlainStreamReader`` around it.
The call sequences below are the ones measured on 4.0.5 and 4.1.4 (docs/offsets.md): a new query,
later triggers, a restart on a checkpoint (with and without a batch to run again), and the
single batch of an AvailableNow run. The import guard and the Arrow schema are here too, since
both differ by line as well.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from rocketmq_spark import pyspark_problem
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.source.offsets import from_spark, to_spark
from rocketmq_spark.source.schema import ARROW_SCHEMA, SCHEMA
from rocketmq_spark.source.spark_api import (
    ADMISSION_CONTROL,
    PlainStreamReader,
    ReadLimit,
    ReadMaxRows,
    for_this_spark,
)
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, ranges, stream

REPO = Path(__file__).resolve().parents[2]
LIMIT = ReadMaxRows(5)


class Recorder:
    """A source in 4.2's shape that records how it is called; its latest offset is ``{"n": 9}``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def initialOffset(self) -> dict:
        self.calls.append(("initialOffset",))
        return {"n": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self.calls.append(("latestOffset", start, limit))
        return {"n": 9}

    def getDefaultReadLimit(self) -> ReadLimit:
        return LIMIT

    def partitions(self, start: dict, end: dict) -> list[str]:
        self.calls.append(("partitions", start, end))
        return ["p"]

    def read(self, partition: Any) -> Any:
        self.calls.append(("read", partition))
        return iter(())

    def commit(self, end: dict) -> None:
        self.calls.append(("commit", end))

    def stop(self) -> None:
        self.calls.append(("stop",))


def test_this_line_is_called_in_the_shape_it_has() -> None:
    has_module = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
    assert ADMISSION_CONTROL == has_module
    reader = RocketMQDataSource({"nameServer": "h:1", "topic": "t", "consumerGroup": "g"}).streamReader(SCHEMA)
    if ADMISSION_CONTROL:
        assert isinstance(reader, RocketMQStreamReader)
        assert list(inspect.signature(reader.latestOffset).parameters) == ["start", "limit"]
    else:
        assert isinstance(reader, PlainStreamReader) and isinstance(reader.source, RocketMQStreamReader)
        assert list(inspect.signature(reader.latestOffset).parameters) == []


def test_a_new_query_plans_from_initial_offsets_computed_once() -> None:
    source = Recorder()
    reader = PlainStreamReader(source)  # type: ignore[arg-type]
    # Spark 4.0/4.1: latestOffset() comes before initialOffset() in a new query.
    assert reader.latestOffset() == {"n": 9}
    assert reader.initialOffset() == {"n": 0}
    assert reader.partitions({"n": 0}, {"n": 9}) == ["p"]
    reader.latestOffset()
    reader.commit({"n": 9})
    assert source.calls == [
        ("initialOffset",),
        ("latestOffset", {"n": 0}, LIMIT),
        ("partitions", {"n": 0}, {"n": 9}),
        ("latestOffset", {"n": 9}, LIMIT),
        ("commit", {"n": 9}),
    ]


def test_a_restart_starts_where_spark_says_the_query_stands() -> None:
    source = Recorder()
    reader = PlainStreamReader(source)  # type: ignore[arg-type]
    assert reader.partitions({"n": 4}, {"n": 4}) == []  # setLatestSeenOffset: nothing to plan
    reader.latestOffset()
    assert source.calls == [("latestOffset", {"n": 4}, LIMIT)]  # never the initial offsets


def test_a_restart_that_runs_the_last_batch_again_starts_after_it() -> None:
    source = Recorder()
    reader = PlainStreamReader(source)  # type: ignore[arg-type]
    reader.partitions({"n": 7}, {"n": 7})
    reader.partitions({"n": 4}, {"n": 7})  # the batch the offset log holds but the commit log not
    reader.latestOffset()
    assert source.calls == [("partitions", {"n": 4}, {"n": 7}), ("latestOffset", {"n": 7}, LIMIT)]


def test_read_and_stop_reach_the_source() -> None:
    source = Recorder()
    reader = PlainStreamReader(source)  # type: ignore[arg-type]
    list(reader.read("p"))  # type: ignore[arg-type]
    reader.stop()
    assert source.calls == [("read", "p"), ("stop",)]


def test_the_notice_is_said_once_at_the_query_s_first_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rocketmq_spark.source.spark_api")
    reader = PlainStreamReader(Recorder(), notice="one batch")  # type: ignore[arg-type]
    reader.latestOffset()
    reader.initialOffset()
    reader.latestOffset()
    assert [r.getMessage() for r in caplog.records] == ["one batch"]
    quiet = PlainStreamReader(Recorder())  # type: ignore[arg-type]
    quiet.latestOffset()
    assert len(caplog.records) == 1


def test_for_this_spark_wraps_only_where_the_api_is_plain() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    source = stream(fake)
    reader = for_this_spark(source, stores=True, limited=True)
    assert (reader is source) == ADMISSION_CONTROL
    if not ADMISSION_CONTROL:
        assert isinstance(reader, PlainStreamReader) and reader.source is source


def test_the_stream_keeps_its_limit_and_stores_each_batch_through_the_plain_api() -> None:
    """The real reader driven as Spark 4.0 drives it: limits per batch, stores one trigger behind."""
    fake = FakeOffsets({A0: (0, 100), A1: (0, 20), B0: (0, 0)}, stored={A0: 40})
    reader = PlainStreamReader(stream(fake, maxMessagesPerTrigger="30"))
    end = reader.latestOffset()
    initial = reader.initialOffset()
    assert initial == to_spark({A0: 40, A1: 20, B0: 0})  # stored, then LAST for the others
    assert end == to_spark({A0: 70, A1: 20, B0: 0})
    assert ranges(reader.partitions(from_json(initial), from_json(end))) == [(A0, 40, 70)]
    fake.ranges[A1] = (0, 30)  # ten more on A1: 40 to read, 30 per trigger
    second = from_spark(reader.latestOffset())
    assert sum(second.values()) - sum(from_spark(end).values()) == 30
    assert second[A0] <= 100 and second[A1] <= 30
    assert fake.stored == {A0: 70, A1: 20, B0: 0}  # the first batch, stored when the second was planned
    reader.partitions(from_json(end), from_json(to_spark(second)))
    third = from_spark(reader.latestOffset())
    assert third == {A0: 100, A1: 30, B0: 0} and fake.stored == second


def test_an_available_now_run_is_one_batch_whose_end_the_next_run_stores() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 6)})
    first = PlainStreamReader(stream(fake, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET"))
    end = first.latestOffset()
    first.partitions(first.initialOffset(), end)
    assert fake.stored == {A0: 0, B0: 0}  # Spark ends the run here: no commit, no stop
    second = PlainStreamReader(stream(fake))  # the next run on the checkpoint
    second.partitions(end, end)
    assert second.latestOffset() == end
    assert fake.stored == {A0: 10, B0: 6}


def from_json(nested: dict) -> dict:
    """Offsets through JSON, as Spark hands them back."""
    return json.loads(json.dumps(nested))  # type: ignore[no-any-return]


# ------------------------------------------------------------------ the Arrow schema


def test_the_arrow_schema_is_the_one_pyspark_checks_batches_against() -> None:
    takes_zone = "timezone" in inspect.signature(to_arrow_schema).parameters  # 4.2+; 4.0/4.1 are UTC
    expected = to_arrow_schema(SCHEMA, timezone="UTC") if takes_zone else to_arrow_schema(SCHEMA)
    assert ARROW_SCHEMA == expected


# ------------------------------------------------------------------ the import guard


@pytest.mark.parametrize("version", ["4.0.0", "4.0.5", "4.1.4", "4.2.1", "4.3.0", "4.1.0.dev0", "4.0.0+databricks"])
def test_every_spark_4_pyspark_will_do(version: str) -> None:
    assert pyspark_problem(version) is None


@pytest.mark.parametrize("version", ["3.5.3", "3.4.0", "2.4.8", "unknown"])
def test_an_older_pyspark_is_named_with_what_is_needed(version: str) -> None:
    problem = pyspark_problem(version)
    assert problem is not None
    assert f"found PySpark {version}" in problem and "PySpark 4.0 or later" in problem
    assert 'pip install "rocketmq-spark[spark]"' in problem


def import_error(tmp_path: Path, fake_pyspark: str | None) -> str:
    """What ``import rocketmq_spark`` prints in a fresh interpreter with the given PySpark."""
    setup = f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]"
    if fake_pyspark is None:
        setup += "; sys.modules['pyspark'] = None"  # no PySpark at all
    else:
        (tmp_path / "pyspark").mkdir()
        (tmp_path / "pyspark" / "__init__.py").write_text(f"__version__ = {fake_pyspark!r}\n")
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"{setup}; import rocketmq_spark"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1
    return done.stderr.strip().splitlines()[-1]


def test_importing_with_pyspark_3_5_fails_with_one_sentence(tmp_path: Path) -> None:
    last = import_error(tmp_path, "3.5.3")
    assert last.startswith("ImportError: rocketmq-spark needs PySpark 4.0 or later")
    assert "found PySpark 3.5.3" in last and last.count(". ") == 0


def test_importing_without_pyspark_fails_with_one_sentence(tmp_path: Path) -> None:
    last = import_error(tmp_path, None)
    assert last.startswith("ImportError: rocketmq-spark needs PySpark 4.0 or later and found no PySpark")
    assert 'pip install "rocketmq-spark[spark]"' in last
