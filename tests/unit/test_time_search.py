"""Search by time on every release: the first offset stored at or after the time.

The fake broker stores messages with given store times and answers SEARCH_OFFSET_BY_TIMESTAMP as
the release does: 5.x with the first entry at or after the time, 4.9 with the entry nearest it
(an entry stored exactly then, else the closer of the two around it, else the last entry), as
RocketMQ 4.9.7's ``ConsumeQueue.getOffsetInQueueByTime`` does. Pulls answer with real record
bytes, so the search reads store times as it does from a real broker.
"""

from __future__ import annotations

import bisect
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
from tests.records import record
from tests.support import PERM_READ_WRITE, TOPIC, VERSION_4_9_7, VERSION_5_3_3

BROKER = "broker-a"
ADDRESS = "127.0.0.1:10911"
T0 = 1_700_000_000_000
# One search request, then one round of pulls: what the usual case costs on 4.9.
USUAL_ROUNDS = 2


class StoreTimeBroker:
    """One broker whose queue ``q`` holds messages ``[first[q], first[q] + len(times[q]))``."""

    def __init__(
        self, times: Sequence[Sequence[int]], first: Sequence[int] | None = None, version: int = VERSION_4_9_7
    ) -> None:
        self.version = version
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
        queue_id = int(call.fields["queueId"])  # type: ignore[call-overload]
        times, first = self.times[queue_id], self.first[queue_id]
        if call.code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            timestamp = int(call.fields["timestamp"])  # type: ignore[call-overload]
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


def search(broker: StoreTimeBroker, timestamp: int) -> dict[int, int]:
    options = parse_options(
        {"nameServer": "127.0.0.1:9876", "topic": TOPIC, "startingTimestamp": str(timestamp)}, kind=ReadKind.BATCH
    )
    reader = OffsetReader(options, Cluster.of(broker))  # type: ignore[arg-type]
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


store_times = st.lists(st.integers(0, 40), max_size=60).map(
    lambda gaps: [T0 + sum(gaps[: i + 1]) for i in range(len(gaps))]
)


@given(
    st.lists(st.tuples(store_times, st.integers(0, 1_000)), min_size=1, max_size=4),
    st.integers(-5, 2_500),
    st.sampled_from([VERSION_4_9_7, VERSION_5_3_3]),
)
def test_every_release_answers_the_first_offset_at_or_after_the_time(
    queues: list[tuple[list[int], int]], delta: int, version: int
) -> None:
    broker = StoreTimeBroker([t for t, _ in queues], first=[f for _, f in queues], version=version)
    assert search(broker, T0 + delta) == expected(broker, T0 + delta)
    pulls = broker.sent.count(RequestCode.PULL_MESSAGE)
    longest = max(len(t) for t, _ in queues)
    # A round per doubling step and per halving at most, after the search and the first pull.
    assert broker.rounds <= USUAL_ROUNDS + 2 * max(1, math.ceil(math.log2(longest + 1)))
    assert pulls <= len(queues) * (broker.rounds - 1)  # at most one pull per queue and round
    if version >= VERSION_5_3_3:
        assert pulls == 0
