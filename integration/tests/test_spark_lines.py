"""The built wheel on each PySpark 4 line it supports: 4.0, 4.1 and 4.2 here (the rest of the
suite runs on 4.3), each in a fresh virtualenv that got its PySpark before the wheel.

Per line: pip must leave that PySpark in place when the wheel goes in; the unit tests pass
against the installed wheel; the line's Spark, run by the line's interpreter (``Driver``: only the
installed package can answer ``format("rocketmq")``), finds the package and takes the adapter's
branches this module expects of the line; and a batch write arrives exactly.

The Spark scenarios go through the adapter's branches (source/spark_api.py, sink/spark_api.py:
admission control, filter pushdown, the Arrow stream writer), and each runs on the lines where it
meets a combination of its branches that neither 4.3 (the rest of the suite) nor an earlier line
has run it on: a committed stream stopped and restarted on its checkpoint, AvailableNow runs, a
batch read of a time window, a stream of a new group that starts at the last offset, and a topic
of 2 x 512 queues read in batch and streamed; and a stream from the source into the sink restarted
on its checkpoint (4.0 writes a stream's rows through the row-based writer, 4.1 and later through
the Arrow one). Each result is checked exactly against what the official Java client produced
and reads back from the brokers.

A line's unit tests and its Spark process start together when its virtualenv is ready, and the
next lines' virtualenvs are built meanwhile; the topics every line reads are made once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from integration.constants import OUTPUT_TAIL_CHARS, REPO
from integration.lines import LINES, Driver, LineVenv, LineVenvs, UnitRun
from integration.sinklines import (
    batch_write_arrives_exactly,
    exactly_once,
    stream_into_the_sink_writes_each_row_once,
)
from integration.support import (
    ClusterHandle,
    create_topic,
    eventually,
    offsets_and_ends,
    position,
    produce,
    spark_offsets,
    store_times,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark_lines]

Unique = Callable[[str], str]
Ends = dict[tuple[str, int], int]
UNIT_TIMEOUT_S = 900
# The first line whose Spark runs Trigger.AvailableNow on a Python source as such; 4.0 and 4.1 run
# it as one batch and never call commit() or stop() after it, so the source stores that batch's
# end only when the next run on the checkpoint plans its first batch.
AVAILABLE_NOW_LINE = (4, 2)
PRODUCERS = 3  # tool runs at once while the topics are made
QUEUES = 2  # per broker
SEND_BATCH = "10"  # messages per send; sends go round the topic's queues
COLUMNS = ["keys", "brokerName", "queueId", "queueOffset"]
POSITIONS = ["brokerName", "queueId", "queueOffset"]
INTERVAL = "500 milliseconds"
# The committed stream: a backlog read PER_TRIGGER at a time, stopped after STOP_AFTER rows,
# restarted after MORE messages arrived.
BACKLOG = 400
MORE = 200
PER_TRIGGER = 100
STOP_AFTER = 2 * PER_TRIGGER
# The restarted stream reads 2 x PER_TRIGGER and more: a new Spark query each time, on a shared box.
RESTART_TIMEOUT_S = 300.0
AVAILABLE = 400
WINDOW_SENDS = ("before", "inside", "after")
WINDOW_GROUP = 60  # messages in each send
OLD = 100  # in the topic before a new group starts at its last offset
NEW = 150  # produced after it started
BIG_QUEUES = 512
BIG_BROKERS = 2
BIG_PER_QUEUE = 10


@dataclass(frozen=True)
class Branches:
    """The adapter's choices on a line, as ``sinkjobs.branches`` reports them."""

    admission_control: bool
    filter_pushdown: bool
    arrow_stream_writer: bool


# 4.3, on which the rest of the suite runs, takes every branch; 4.0 none (no admission control,
# no filter classes, no Arrow stream writer); 4.1 the last two; 4.2 all three.
SUITE_BRANCHES = Branches(admission_control=True, filter_pushdown=True, arrow_stream_writer=True)
BRANCHES = {
    "4.0.5": Branches(admission_control=False, filter_pushdown=False, arrow_stream_writer=False),
    "4.1.4": Branches(admission_control=False, filter_pushdown=True, arrow_stream_writer=True),
    "4.2.1": Branches(admission_control=True, filter_pushdown=True, arrow_stream_writer=True),
}


def lines_new_to(*branches: str) -> list[str]:
    """The lines where a scenario going through ``branches`` meets a combination of them that
    neither 4.3 nor an earlier line has run it on: the same scenario on the same branches of
    another line would repeat what ran."""
    seen = {tuple(getattr(SUITE_BRANCHES, name) for name in branches)}
    chosen = []
    for line in LINES:
        taken = tuple(getattr(BRANCHES[line], name) for name in branches)
        if taken not in seen:
            seen.add(taken)
            chosen.append(line)
    return chosen


def on_lines(*branches: str) -> pytest.MarkDecorator:
    """Runs a scenario only on ``lines_new_to(*branches)``."""
    return pytest.mark.parametrize("line", lines_new_to(*branches), indirect=True)


# A stream read of the source goes through admission control; a batch read plans with filters.
STREAM_READ = "admission_control"
BATCH_READ = "filter_pushdown"
STREAM_WRITE = "arrow_stream_writer"
# The lines whose own topics the stream scenarios produce more messages to.
STREAM_READ_LINES = lines_new_to(STREAM_READ)


@dataclass(frozen=True)
class Shared:
    """A topic every line reads with groups of its own, and what the tests expect of it."""

    topic: str
    keys: list[str]
    ends: Ends


@dataclass(frozen=True)
class Window:
    topic: str
    start_ms: int
    end_ms: int  # exclusive
    keys: list[str]  # of the messages stored in [start_ms, end_ms)


@dataclass(frozen=True)
class LineTopics:
    """Topics of one line's own, which its scenarios produce more messages to."""

    restart: str
    backlog_keys: list[str]
    last: str


@dataclass(frozen=True)
class Data:
    available: Shared
    window: Window
    big: Shared
    lines: dict[str, LineTopics]


def keys_of(sent: list[dict[str, Any]]) -> list[str]:
    return [m["keys"] for m in sent]


def shared_topic(rocketmq: ClusterHandle, topic: str, queues: int, count: int, *args: str) -> Shared:
    create_topic(rocketmq, topic, queues=queues)
    sent = produce(rocketmq, topic, count, *args)
    _, ends = offsets_and_ends(rocketmq, topic, f"{topic}-probe")
    return Shared(topic, keys_of(sent), ends)


def window_topic(rocketmq: ClusterHandle, topic: str) -> Window:
    """Three sends, each a JVM of its own, so their store times are apart; the window is the
    middle one's, from its first store time to just past its last."""
    create_topic(rocketmq, topic, queues=QUEUES)
    sends = [
        produce(rocketmq, topic, WINDOW_GROUP, "--keys", f"{topic}-{part}-{{i}}", "--batch", SEND_BATCH)
        for part in WINDOW_SENDS
    ]
    times = store_times(rocketmq, topic, WINDOW_GROUP * len(sends))
    before, inside, after = ([times[position(m)] for m in send] for send in sends)
    start, end = min(inside), max(inside) + 1
    assert max(before) < start and min(after) >= end, "the sends' store times overlap"
    return Window(topic, start, end, keys_of(sends[1]))


def line_topics(rocketmq: ClusterHandle, run: str, line: str) -> LineTopics:
    restart, last = f"lines-restart-{line.replace('.', '')}-{run}", f"lines-last-{line.replace('.', '')}-{run}"
    create_topic(rocketmq, restart, queues=QUEUES)
    backlog = produce(rocketmq, restart, BACKLOG, "--keys", f"{restart}-a-{{i}}", "--batch", SEND_BATCH)
    create_topic(rocketmq, last, queues=QUEUES)
    produce(rocketmq, last, OLD, "--keys", f"{last}-old-{{i}}", "--batch", SEND_BATCH, "--quiet")
    return LineTopics(restart, keys_of(backlog), last)


@pytest.fixture(scope="module")
def data(rocketmq: ClusterHandle) -> Data:
    """Every topic of the module, made and filled once, a few tool runs at a time."""
    run = uuid.uuid4().hex[:8]
    with ThreadPoolExecutor(max_workers=PRODUCERS) as tools:
        big = tools.submit(
            shared_topic,
            rocketmq,
            f"lines-big-{run}",
            BIG_QUEUES,
            BIG_BROKERS * BIG_QUEUES * BIG_PER_QUEUE,
            "--batch",
            str(BIG_PER_QUEUE),
            "--each-queue",
            "--quiet",
        )
        window = tools.submit(window_topic, rocketmq, f"lines-window-{run}")
        available = tools.submit(
            shared_topic,
            rocketmq,
            f"lines-available-{run}",
            QUEUES,
            AVAILABLE,
            "--keys",
            f"lines-available-{run}-{{i}}",
            "--batch",
            SEND_BATCH,
        )
        lines = {line: tools.submit(line_topics, rocketmq, run, line) for line in STREAM_READ_LINES}
        made = Data(
            available.result(), window.result(), big.result(), {line: topics.result() for line, topics in lines.items()}
        )
    assert len(made.big.ends) == BIG_BROKERS * BIG_QUEUES and set(made.big.ends.values()) == {BIG_PER_QUEUE}
    return made


@pytest.fixture(scope="module", params=LINES)
def line(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def venv(line: str, line_venvs: LineVenvs) -> LineVenv:
    return line_venvs.get(line)


@pytest.fixture(scope="module")
def unit_run(venv: LineVenv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnitRun]:
    tests = UnitRun(venv, REPO / "tests", tmp_path_factory.mktemp(f"unit-{venv.line}"))
    try:
        yield tests
    finally:
        tests.stop()


@pytest.fixture(scope="module")
def driver(venv: LineVenv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    """One Spark process of the line's interpreter for every scenario of the line."""
    spark = Driver(venv.python, tmp_path_factory.mktemp(f"drive-{venv.line}"))
    try:
        yield spark
    finally:
        spark.end()


@pytest.fixture(scope="module", autouse=True)
def line_started(venv: LineVenv, data: Data, unit_run: UnitRun, driver: Driver) -> None:
    """In this order: the virtualenv (the topics are made while the lines' virtualenvs build), then
    the unit tests and the Spark process, which start together."""


def native_available_now(venv: LineVenv) -> bool:
    major, minor = (int(part) for part in venv.after.version.split(".")[:2])
    return (major, minor) >= AVAILABLE_NOW_LINE


def rows_read(run: dict[str, Any]) -> int:
    return sum(trigger["rows"] for trigger in run["triggers"])


def sink_rows(driver: Driver, sink: Path, columns: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in driver.call("read", path=str(sink), columns=columns)["rows"])


def sink_keys(driver: Driver, sink: Path) -> Counter[str]:
    return Counter(row[0] for row in sink_rows(driver, sink, ["keys"]).elements())


def settled(rocketmq: ClusterHandle, topic: str, group: str) -> Ends | None:
    """The topic's end offsets once the group's stored offsets equal them, else None."""
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    return ends if stored == ends else None


def available_now_to_the_end(
    driver: Driver,
    venv: LineVenv,
    rocketmq: ClusterHandle,
    shared: Shared,
    group: str,
    columns: list[str],
    workdir: Path,
) -> dict[str, Any]:
    """An AvailableNow run of a new group from the first offset: it must end at the topic's end,
    and the group's stored offsets must be that end (on 4.0 and 4.1 after a second run on the
    checkpoint, which must read nothing). The first run's answer."""
    run = {
        "sink": str(workdir / "sink"),
        "checkpoint": str(workdir / "checkpoint"),
        "columns": columns,
        "options": {
            "nameServer": rocketmq.namesrv_addr,
            "topic": shared.topic,
            "consumerGroup": group,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        },
    }
    first = driver.call("available_now", **run)
    assert spark_offsets(first["triggers"][-1]["endOffset"], shared.topic) == shared.ends
    if not native_available_now(venv):
        assert rows_read(driver.call("available_now", **run)) == 0
    stored, ends = offsets_and_ends(rocketmq, shared.topic, group)
    assert stored == ends == shared.ends
    return first


def test_installing_the_wheel_leaves_the_lines_pyspark_in_place(venv: LineVenv) -> None:
    assert venv.before.version == venv.line
    assert venv.after == venv.before, venv.wheel_output[-OUTPUT_TAIL_CHARS:]
    assert venv.pip_touched_pyspark() == [], venv.wheel_output[-OUTPUT_TAIL_CHARS:]


def test_the_lines_spark_runs_the_installed_package(venv: LineVenv, driver: Driver) -> None:
    where = driver.call("where")
    assert where["spark"] == venv.line
    assert where["package"].startswith(str(venv.root))
    taken = driver.call("branches")
    assert Branches(*(taken[field.name] for field in fields(Branches))) == BRANCHES[venv.line], taken


@on_lines(STREAM_READ)
def test_a_committed_stream_restarted_on_its_checkpoint_reads_each_message_once(
    driver: Driver, line: str, data: Data, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = data.lines[line].restart, unique("lines-restart-group")
    sink = tmp_path / "sink"
    stream = {
        "name": topic,
        "sink": str(sink),
        "checkpoint": str(tmp_path / "checkpoint"),
        "columns": COLUMNS,
        "trigger": {"processingTime": INTERVAL},
        "options": {
            "nameServer": rocketmq.namesrv_addr,
            "topic": topic,
            "consumerGroup": group,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "maxMessagesPerTrigger": str(PER_TRIGGER),
        },
    }
    driver.call("start", **stream)
    driver.call("wait", name=topic, rows=STOP_AFTER)
    first = driver.call("stop", name=topic)
    sent = data.lines[line].backlog_keys + keys_of(
        produce(rocketmq, topic, MORE, "--keys", f"{topic}-b-{{i}}", "--batch", SEND_BATCH)
    )
    driver.call("start", **stream)

    # Not a count of rows from the first run's reports: stop() can come after Spark committed a
    # batch and before it reported it. The broker trails the sink by one trigger: the trigger
    # after the last batch stores its end, and it starts only after that batch was reported.
    def caught_up() -> Ends | None:
        driver.call("wait", name=topic, rows=0)  # raises the query's error if it stopped
        return settled(rocketmq, topic, group)

    ends = eventually(caught_up, "the stored offsets never reached the end", RESTART_TIMEOUT_S)
    second = driver.call("stop", name=topic)

    assert sink_keys(driver, sink) == Counter(sent)
    triggers = first["triggers"] + second["triggers"]
    assert max(t["rows"] for t in triggers) <= PER_TRIGGER
    assert spark_offsets(second["triggers"][-1]["endOffset"], topic) == ends


@on_lines(STREAM_READ)
def test_available_now_reads_everything_once_and_stores_the_end(
    driver: Driver, venv: LineVenv, rocketmq: ClusterHandle, data: Data, unique: Unique, tmp_path: Path
) -> None:
    run = available_now_to_the_end(
        driver, venv, rocketmq, data.available, unique("lines-available-group"), COLUMNS, tmp_path
    )
    assert rows_read(run) == len(data.available.keys)
    assert sink_keys(driver, tmp_path / "sink") == Counter(data.available.keys)


@on_lines(BATCH_READ)
def test_a_batch_read_of_a_time_window_reads_exactly_the_messages_stored_in_it(
    driver: Driver, rocketmq: ClusterHandle, data: Data
) -> None:
    read = driver.call(
        "batch",
        columns=["keys"],
        options={
            "nameServer": rocketmq.namesrv_addr,
            "topic": data.window.topic,
            "startingTimestamp": str(data.window.start_ms),
            "endingTimestamp": str(data.window.end_ms),
        },
    )
    assert sorted(row[0] for row in read["rows"]) == sorted(data.window.keys)


@on_lines(STREAM_READ)
def test_a_new_group_from_the_last_offset_reads_only_what_came_after_it_started(
    driver: Driver, line: str, data: Data, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = data.lines[line].last, unique("lines-last-group")
    sink = tmp_path / "sink"
    driver.call(
        "start",
        name=topic,
        sink=str(sink),
        checkpoint=str(tmp_path / "checkpoint"),
        columns=COLUMNS,
        trigger={"processingTime": INTERVAL},
        options={
            "nameServer": rocketmq.namesrv_addr,
            "topic": topic,
            "consumerGroup": group,
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        },
    )
    # Its first trigger has fixed where each queue starts.
    started = driver.call("wait", name=topic, rows=0)
    new = produce(rocketmq, topic, NEW, "--keys", f"{topic}-new-{{i}}", "--batch", SEND_BATCH)
    driver.call("wait", name=topic, rows=NEW)
    eventually(lambda: settled(rocketmq, topic, group), "the stored offsets never reached the end")
    run = driver.call("stop", name=topic)

    assert rows_read(started) == 0
    assert rows_read(run) == NEW
    assert sink_keys(driver, sink) == Counter(keys_of(new))


@on_lines(STREAM_READ, BATCH_READ)
def test_a_topic_of_a_thousand_queues_is_read_and_streamed_exactly_once(
    driver: Driver, venv: LineVenv, rocketmq: ClusterHandle, data: Data, unique: Unique, tmp_path: Path
) -> None:
    every = Counter((broker, queue, offset) for (broker, queue), end in data.big.ends.items() for offset in range(end))

    read = driver.call(
        "batch", columns=POSITIONS, options={"nameServer": rocketmq.namesrv_addr, "topic": data.big.topic}
    )
    assert Counter(tuple(row) for row in read["rows"]) == every

    run = available_now_to_the_end(driver, venv, rocketmq, data.big, unique("lines-big-group"), POSITIONS, tmp_path)
    assert rows_read(run) == len(every)
    assert sink_rows(driver, tmp_path / "sink", POSITIONS) == every


def test_unit_tests_pass_against_the_installed_wheel(venv: LineVenv, unit_run: UnitRun, tmp_path: Path) -> None:
    found = venv.run(
        "-c", "import rocketmq_spark; print(rocketmq_spark.__file__)", cwd=tmp_path, timeout=UNIT_TIMEOUT_S
    )
    assert found.stdout.startswith(str(venv.root)), found
    code, output = unit_run.wait(UNIT_TIMEOUT_S)
    assert code == 0, output


def test_a_batch_write_arrives_exactly(driver: Driver, rocketmq: ClusterHandle, unique: Unique) -> None:
    batch_write_arrives_exactly(driver, rocketmq, unique("lines-write"))


@on_lines(STREAM_READ, STREAM_WRITE)
def test_a_stream_into_the_sink_restarted_on_its_checkpoint_writes_each_row_once(
    driver: Driver, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    origin, copy, group = unique("lines-origin"), unique("lines-copy"), unique("lines-copy-group")
    stream_into_the_sink_writes_each_row_once(driver, rocketmq, origin, copy, group, tmp_path / "checkpoint")


@on_lines(STREAM_WRITE)
def test_exactly_once_writes_each_row_once_through_this_line_s_writers(
    driver: Driver, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """deliveryGuarantee=exactly-once through the line's stream writer (rows on 4.0, Arrow from
    4.1) and its batch writer; a batch write made twice with one writeId writes once."""
    options = exactly_once(rocketmq, unique("lines-eo-group"), unique("lines-eo-ledger"))
    origin, copy, group = unique("lines-eo-origin"), unique("lines-eo-copy"), unique("lines-eo-copy-group")
    stream_into_the_sink_writes_each_row_once(driver, rocketmq, origin, copy, group, tmp_path / "checkpoint", options)
    # A producer group of its own: the stream's query holds its group's lock for a minute after it stops.
    write = {**options, "producerGroup": unique("lines-eo-write-group"), "writeId": unique("write")}
    batch_write_arrives_exactly(driver, rocketmq, unique("lines-eo-write"), write)
