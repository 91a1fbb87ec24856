"""Search by time on every release: the first offset stored at or after the time.

The fake broker stores messages with given store times and answers SEARCH_OFFSET_BY_TIMESTAMP as
the release does: 5.x with the first entry at or after the time, 4.9 with the entry nearest it
(an entry stored exactly then, else the closer of the two around it, else the last entry), as
RocketMQ 4.9.7's ``ConsumeQueue.getOffsetInQueueByTime`` does. Pulls answer with real record
bytes, so the search reads store times as it does from a real broker.

A 5.x broker whose consume queues are in RocksDB (``storeType=defaultRocksDB``) answers as the
file store does but on a queue whose entries have all expired: there it answers -1, which the
file store brings up to the queue's min offset (RocketMQ 5.3.3's and 5.5.1's
``RocksDBConsumeQueueStore.getOffsetInQueueByTime`` leave out the file store's clamp).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.cluster import Cluster
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.route import BrokerData, QueueData, TopicRoute
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.planning import reconcile
from tests.records import record
from tests.support import PERM_READ_WRITE, TOPIC, VERSION_4_9_7, VERSION_5_3_3

BROKER = "broker-a"
ADDRESS = "127.0.0.1:10911"
T0 = 1_700_000_000_000
# One search request, then one round of pulls: what the usual case costs on 4.9.
USUAL_ROUNDS = 2
# What a RocksDB consume queue answers to a search on a queue whose entries have all expired.
NO_ENTRY_LEFT = -1


class StoreTimeBroker:
    """One broker whose queue ``q`` holds messages ``[first[q], first[q] + len(times[q]))``; one
    with no times but a first offset above 0 held messages that have all expired. ``rocksdb``:
    its consume queues are in RocksDB (5.x only)."""

    def __init__(
        self,
        times: Sequence[Sequence[int]],
        first: Sequence[int] | None = None,
        version: int = VERSION_4_9_7,
        rocksdb: bool = False,
    ) -> None:
        self.version = version
        self.rocksdb = rocksdb
        self.times = [list(t) for t in times]
        self.first = list(first) if first is not None else [0] * len(times)
        self.sent: list[int] = []
        self.rounds = 0

    def topic_route(self, topic: str) -> TopicRoute:
        queues = len(self.times)
        return TopicRoute(
            topic, (QueueData(BROKER, queues, queues, PERM_READ_WRITE),), {BROKER: BrokerData(BROKER, {0: ADDRESS})}
        )

    def serve(self, handler: Any) -> None:
        """No broker asks a batch read anything."""

    def call_many(self, addressed: Sequence[tuple[str, Call[Any]]], window: int = 64) -> list[Any]:
        self.rounds += 1
        outcomes = []
        for address, call in addressed:
            self.sent.append(call.code)
            response = self.answer(call)
            response.version = self.version
            try:
                outcomes.append(call.read(response, address))
            except RocketMQError as err:
                outcomes.append(err)
        return outcomes

    def answer(self, call: Call[Any]) -> RemotingCommand:
        if call.code == RequestCode.GET_TOPIC_STATS_INFO:
            return self.topic_stats()
        queue_id = int(call.fields["queueId"])  # type: ignore[call-overload]
        times, first = self.times[queue_id], self.first[queue_id]
        if call.code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            timestamp = int(call.fields["timestamp"])  # type: ignore[call-overload]
            if self.rocksdb and not times and first > 0:
                return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": str(NO_ENTRY_LEFT)})
            found = first_at_or_after(times, timestamp) if self.version >= VERSION_5_3_3 else nearest(times, timestamp)
            return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": str(first + found)})
        assert call.code == RequestCode.PULL_MESSAGE, call.code
        assert call.fields["subscription"] == "*"
        offset, count = int(call.fields["queueOffset"]), int(call.fields["maxMsgNums"])  # type: ignore[call-overload]
        end = first + len(times)
        bounds = {"minOffset": str(first), "maxOffset": str(end)}
        if offset < first or offset > end:
            return RemotingCommand(ResponseCode.PULL_OFFSET_MOVED, ext_fields={"nextBeginOffset": str(first), **bounds})
        if offset == end:
            return RemotingCommand(ResponseCode.PULL_NOT_FOUND, ext_fields={"nextBeginOffset": str(end), **bounds})
        stop = min(end, offset + count)
        body = b"".join(
            record(topic=TOPIC.encode(), queue_id=queue_id, queue_offset=o, store_timestamp=times[o - first])
            for o in range(offset, stop)
        )
        return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"nextBeginOffset": str(stop), **bounds}, body=body)

    def topic_stats(self) -> RemotingCommand:
        """Min and max offsets of every queue, as fastjson writes a TopicStatsTable."""
        entries = [
            json.dumps({"brokerName": BROKER, "queueId": q, "topic": TOPIC}, separators=(",", ":"))
            + ":"
            + json.dumps(
                {"lastUpdateTimestamp": times[-1] if times else 0, "maxOffset": first + len(times), "minOffset": first},
                separators=(",", ":"),
            )
            for q, (times, first) in enumerate(zip(self.times, self.first))
        ]
        return RemotingCommand(ResponseCode.SUCCESS, body=('{"offsetTable":{' + ",".join(entries) + "}}").encode())

    def close(self) -> None:
        pass


def first_at_or_after(times: Sequence[int], timestamp: int) -> int:
    """What the source must answer: the index of the first time at or after ``timestamp``."""
    return bisect.bisect_left(times, timestamp)


def nearest(times: Sequence[int], timestamp: int) -> int:
    """4.9's answer: halve the entries until one is stored exactly then; else the closer in time
    of the last entries found before and after it (the earlier one on a tie)."""
    low, high = 0, len(times) - 1
    before = after = None
    while low <= high:
        middle = (low + high) // 2
        if times[middle] == timestamp:
            return middle
        if times[middle] > timestamp:
            after, high = middle, middle - 1
        else:
            before, low = middle, middle + 1
    if before is None:
        return after if after is not None else 0
    if after is None:
        return before
    return after if timestamp - times[before] > times[after] - timestamp else before


def offset_reader(broker: StoreTimeBroker, timestamp: int) -> OffsetReader:
    options = parse_options(
        {"nameServer": "127.0.0.1:9876", "topic": TOPIC, "startingTimestamp": str(timestamp)}, kind=ReadKind.BATCH
    )
    return OffsetReader(options, Cluster.of(broker))  # type: ignore[arg-type]


def search(broker: StoreTimeBroker, timestamp: int) -> dict[int, int]:
    reader = offset_reader(broker, timestamp)
    queues = sorted(reader.queues())
    return {q.queue_id: offset for q, offset in reader.offsets_for_time(queues, timestamp).items()}


def expected(broker: StoreTimeBroker, timestamp: int) -> dict[int, int]:
    return {q: broker.first[q] + first_at_or_after(times, timestamp) for q, times in enumerate(broker.times)}


def test_the_fake_answers_as_4_9_does_near_not_at_the_time() -> None:
    """Between two messages 4.9 answers the closer one, which may be before the time."""
    times = [T0, T0 + 10, T0 + 20]
    assert nearest(times, T0 + 12) == 1  # stored before the time: the answer wanted is 2
    assert nearest(times, T0 + 100) == 2  # every message older: the answer wanted is 3
    assert nearest([T0] * 7, T0) == 3  # a message stored then, not the first stored then


def test_4_9_answers_are_corrected_with_one_pull_per_queue_in_the_usual_case() -> None:
    times = [[T0 + 10 * i for i in range(20)], [T0 + 10 * i + 3 for i in range(20)]]
    broker = StoreTimeBroker(times)
    timestamp = T0 + 52  # nearer to 50 (stored before it) on queue 0, to 53 on queue 1
    assert [nearest(t, timestamp) for t in times] == [5, 5]
    assert search(broker, timestamp) == {0: 6, 1: 5}
    assert broker.sent.count(RequestCode.PULL_MESSAGE) == len(times)
    assert broker.rounds == USUAL_ROUNDS


def test_4_9_time_after_every_message_is_the_max_offset() -> None:
    broker = StoreTimeBroker([[T0, T0 + 1, T0 + 2], []], first=[5, 9])
    assert search(broker, T0 + 60_000) == {0: 8, 1: 9}
    assert search(broker, T0 - 60_000) == {0: 5, 1: 9}


def test_4_9_a_long_run_of_one_store_time_is_walked_back_in_few_rounds() -> None:
    """A big batch shares one store time; 4.9 answers from the middle of it."""
    run = 5_000
    broker = StoreTimeBroker([[T0] * 3 + [T0 + 1] * run + [T0 + 2] * 3])
    assert nearest(broker.times[0], T0 + 1) > 3
    assert search(broker, T0 + 1) == {0: 3}
    assert broker.rounds <= 1 + 2 * math.ceil(math.log2(run)) + 1


def test_5_x_answers_are_used_as_they_are() -> None:
    broker = StoreTimeBroker([[T0 + i for i in range(10)]], version=VERSION_5_3_3)
    assert search(broker, T0 + 4) == {0: 4}
    assert broker.sent == [RequestCode.SEARCH_OFFSET_BY_TIMESTAMP]


def test_a_rocksdb_queue_whose_entries_all_expired_starts_at_its_min_offset_as_on_the_file_store() -> None:
    """Queue 0 held ten messages, all expired (min = max = 10); queue 1 never held one; queue 2
    holds messages. The RocksDB store answers -1 on queue 0 whatever the time; the file store's
    answer, the queue's min offset, is what the search gives, so that a start there is no loss."""
    times = [[], [], [T0 + i for i in range(5)]]
    first = [10, 0, 3]
    for timestamp in (T0 - 60_000, T0 + 2, T0 + 60_000):
        rocksdb = StoreTimeBroker(times, first, version=VERSION_5_3_3, rocksdb=True)
        file = StoreTimeBroker(times, first, version=VERSION_5_3_3)
        assert search(rocksdb, timestamp) == search(file, timestamp) == expected(file, timestamp)
        assert rocksdb.sent == [RequestCode.SEARCH_OFFSET_BY_TIMESTAMP] * 3 + [RequestCode.GET_TOPIC_STATS_INFO]
        assert file.sent == [RequestCode.SEARCH_OFFSET_BY_TIMESTAMP] * 3

    reader = offset_reader(StoreTimeBroker(times, first, version=VERSION_5_3_3, rocksdb=True), T0)
    queues = sorted(reader.queues())
    latest = reader.max_offsets(queues)
    starts, losses = reconcile(reader.offsets_for_time(queues, T0), reader.min_offsets(queues), latest)
    assert losses == [] and starts == {q: first[q.queue_id] for q in queues}


store_times = st.lists(st.integers(0, 40), max_size=60).map(
    lambda gaps: [T0 + sum(gaps[: i + 1]) for i in range(len(gaps))]
)


@given(
    st.lists(st.tuples(store_times, st.integers(0, 1_000)), min_size=1, max_size=4),
    st.integers(-5, 2_500),
    st.sampled_from([(VERSION_4_9_7, False), (VERSION_5_3_3, False), (VERSION_5_3_3, True)]),
)
def test_every_release_answers_the_first_offset_at_or_after_the_time(
    queues: list[tuple[list[int], int]], delta: int, store: tuple[int, bool]
) -> None:
    """On each release and, on 5.x, each consume queue store: file or RocksDB."""
    version, rocksdb = store
    broker = StoreTimeBroker([t for t, _ in queues], first=[f for _, f in queues], version=version, rocksdb=rocksdb)
    assert search(broker, T0 + delta) == expected(broker, T0 + delta)
    pulls = broker.sent.count(RequestCode.PULL_MESSAGE)
    longest = max(len(t) for t, _ in queues)
    # A round per doubling step and per halving at most, after the search and the first pull.
    assert broker.rounds <= USUAL_ROUNDS + 2 * max(1, math.ceil(math.log2(longest + 1)))
    assert pulls <= len(queues) * (broker.rounds - 1)  # at most one pull per queue and round
    if version >= VERSION_5_3_3:
        assert pulls == 0
