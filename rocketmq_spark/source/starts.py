"""Where a new query starts on each queue: the rules of ``startingTimestamp``, ``startingOffsets``
and ``consumeFromWhere`` applied to what the brokers say. No I/O of its own: the broker questions
go to whatever answers :class:`BrokerOffsets` (the driver's offset reader, or a fake in tests)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import MessageQueue
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import (
    CONSUMER_GROUP,
    STARTING_OFFSETS,
    ConsumeFromWhere,
    SourceOptions,
    StartingMode,
)

log = logging.getLogger(__name__)


class BrokerOffsets(Protocol):
    """The broker questions the start rules ask."""

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap: ...

    def max_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap: ...

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap: ...

    def stored_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int | None]: ...


def starting_offsets(options: SourceOptions, queues: Iterable[MessageQueue], brokers: BrokerOffsets) -> OffsetMap:
    """Where a new query starts on each queue, by the rules of the options reference."""
    queue_list = sorted(queues)
    if options.starting_timestamp_ms is not None:
        return brokers.offsets_for_time(queue_list, options.starting_timestamp_ms)
    if options.starting_mode is StartingMode.EARLIEST:
        return brokers.min_offsets(queue_list)
    if options.starting_mode is StartingMode.LATEST:
        return brokers.max_offsets(queue_list)
    explicit: OffsetMap = {}
    if options.starting_mode is StartingMode.SPECIFIC:
        check_queues_exist(STARTING_OFFSETS, options.starting_offsets, queue_list)
        explicit = dict(options.starting_offsets)
        check_within_ends(STARTING_OFFSETS, explicit, brokers.max_offsets(sorted(explicit)))
    rest = [q for q in queue_list if q not in explicit]
    return {**explicit, **_group_offsets(options, rest, brokers)}


def first_seen_offsets(
    options: SourceOptions, queues: Iterable[MessageQueue], brokers: BrokerOffsets, since_ms: int | None
) -> OffsetMap:
    """Where a running query starts queues it sees for the first time (the topic expanded, a
    broker came back, a queue became readable again).

    The group's stored offset where there is one: a broker that was away when the query started
    comes back with the group's progress on it, which is not to be read again. Otherwise the
    query's start rule as of the query's start (``since_ms``): min for earliest and FIRST, the
    first offset stored at or after the start for latest and LAST, the given time for timestamps.
    A queue created after the start thus begins at its min offset. A query restarted on its
    checkpoint does not know when it first started: there LAST and latest begin at the min offset,
    which reads a queue again rather than skip part of it.
    """
    queue_list = sorted(queues)
    if not queue_list:
        return {}
    group = options.consumer_group
    stored = brokers.stored_offsets(queue_list, group) if group is not None else dict.fromkeys(queue_list)
    found = {q: offset for q, offset in stored.items() if offset is not None}
    rest = [q for q in queue_list if q not in found]
    if not rest:
        return found
    if options.starting_timestamp_ms is not None:
        return {**found, **brokers.offsets_for_time(rest, options.starting_timestamp_ms)}
    if options.starting_mode is StartingMode.EARLIEST:
        return {**found, **brokers.min_offsets(rest)}
    where = options.consume_from_where
    if options.starting_mode is StartingMode.LATEST or where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
        since = brokers.offsets_for_time(rest, since_ms) if since_ms is not None else brokers.min_offsets(rest)
        return {**found, **since}
    return {**found, **_fallback_offsets(options, rest, brokers)}


def check_queues_exist(option: str, named: Iterable[MessageQueue], queues: Iterable[MessageQueue]) -> None:
    """Queues a user named must be queues of the route: one that is not is a typo or a stale
    name, which reading the others would hide."""
    route = sorted(queues)
    missing = sorted(set(named) - set(route))
    if missing:
        raise ConfigurationError(
            option,
            f"names queues that do not exist: {', '.join(map(str, missing))}",
            f"Use queues of the route: {', '.join(map(str, route))}",
        )


def check_within_ends(option: str, offsets: Mapping[MessageQueue, int], ends: Mapping[MessageQueue, int]) -> None:
    """Offsets a user gave must be within their queues: one past a queue's end names a message
    that does not exist (yet), which is a mistake in the option, not data the query lost. A queue
    missing from ``ends`` (its broker did not answer) is not judged."""
    beyond = [
        f"{queue}: {offset} is beyond the queue's end (max {ends[queue]})"
        for queue, offset in sorted(offsets.items())
        if queue in ends and offset > ends[queue]
    ]
    if beyond:
        raise ConfigurationError(
            option,
            f"names offsets past the end of their queues: {'; '.join(beyond)}",
            "Give offsets at most each queue's max offset (the next offset to be written), or use latest",
        )


def _group_offsets(options: SourceOptions, queues: list[MessageQueue], brokers: BrokerOffsets) -> OffsetMap:
    """The group's stored offset, or the consumeFromWhere fallback where none is stored."""
    if not queues:
        return {}
    group = options.consumer_group
    if group is None:
        raise ConfigurationError(
            CONSUMER_GROUP,
            f"is required with {STARTING_OFFSETS}=group",
            "Set the group whose stored offsets to start from, or another startingOffsets",
        )
    stored = brokers.stored_offsets(queues, group)
    unstored = [q for q, offset in stored.items() if offset is None]
    fallback = _fallback_offsets(options, unstored, brokers)
    if unstored:
        log.info(
            "no stored offset for group %s on %d queue(s); %s applies",
            group,
            len(unstored),
            options.consume_from_where.value,
        )
    return {q: offset if offset is not None else fallback[q] for q, offset in stored.items()}


def _fallback_offsets(options: SourceOptions, queues: list[MessageQueue], brokers: BrokerOffsets) -> OffsetMap:
    if not queues:
        return {}
    where = options.consume_from_where
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return brokers.min_offsets(queues)
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return brokers.offsets_for_time(queues, options.consume_timestamp_ms)
    return brokers.max_offsets(queues)
