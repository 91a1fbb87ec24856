"""Offsets from the brokers, on the driver: routes, min/max offsets, stored offsets, search by time.

The micro-batch and batch readers ask this module every question that needs a broker; it never
decides policy. Per-queue requests go out in parallel, since a topic on several brokers has
dozens of queues and each question is one round trip per queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import Boundary, RocketMQClient
from rocketmq_spark.remoting.errors import BrokerResponseError, ConfigurationError, TopicNotFoundError
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.options import (
    CONSUMER_GROUP, STARTING_OFFSETS, TOPIC, ConsumeFromWhere, SourceOptions, StartingMode,
)

log = logging.getLogger(__name__)

MAX_PARALLEL_REQUESTS = 16
T = TypeVar("T")


class OffsetReader:
    """Broker-side facts about the queues of the source's topics."""

    def __init__(self, options: SourceOptions, client: RocketMQClient | None = None) -> None:
        self.options = options
        self.client = client or RocketMQClient(options.client)
        self.retry = options.retry
        self._addresses: dict[MessageQueue, str] = {}
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL_REQUESTS, thread_name_prefix="rocketmq-offsets")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.client.close()

    # ------------------------------------------------------------------ routes

    def queues(self, missing_ok: bool = False) -> dict[MessageQueue, str]:
        """Every readable queue of the source's topics, with the address to send its requests to.

        A topic the name server does not know is a configuration error when a query starts; once
        it runs (``missing_ok``) it means that no broker serving the topic is registered right now.
        """
        found: dict[MessageQueue, str] = {}
        for topic in self.options.topics:
            try:
                route = self.retry.call(lambda: self.client.topic_route(topic), f"route of {topic}")
            except TopicNotFoundError as err:
                if missing_ok:
                    continue
                raise ConfigurationError(
                    TOPIC, f"topic '{self.options.display_topic(topic)}' does not exist on "
                    f"{';'.join(self.options.client.name_servers)}",
                    "Create it, or check the topic name and the nameServer option") from err
            for queue in route.readable_queues():
                address = route.master_address(queue.broker_name)
                if address is not None:
                    found[queue] = address
        self._addresses = found  # the routes as they are now: a stopped broker drops out
        return found

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Of queues missing from the routes, those whose broker is not registered right now.

        A stopped or restarting broker drops out of the routes; its queues come back with it, so
        they are waited for, not lost. A queue whose broker is up but no longer lists it is gone.
        """
        queues = set(absent)
        if not queues:
            return set()
        live = self.retry.call(self.client.live_brokers, "cluster info")
        if live is None:
            return queues
        # A broker that registered again between the routes and this answer lists its queues
        # again by now: only a queue still missing from fresh routes is gone.
        back = self.queues(missing_ok=True)
        return {q for q in queues if q.broker_name not in live or q in back}

    def address(self, queue: MessageQueue) -> str:
        if queue not in self._addresses:
            self.queues()
        if queue not in self._addresses:
            raise ConfigurationError(STARTING_OFFSETS, f"queue {queue} does not exist",
                                     "Name only queues the topic's route lists")
        return self._addresses[queue]

    def _each(self, queues: Iterable[MessageQueue], call: Callable[[str, MessageQueue], T],
              retry: bool = True) -> dict[MessageQueue, T]:
        """``call`` for every queue in parallel, each retried (if ``retry``) while its broker is unreachable."""
        queue_list = list(queues)
        policy = self.retry if retry else self.retry.once()
        results = self._pool.map(lambda q: policy.call(lambda: call(self.address(q), q), f"request for {q}"), queue_list)
        return dict(zip(queue_list, results))

    # ----------------------------------------------------------------- offsets

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        return self._each(queues, self.client.min_offset)

    def max_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        return self._each(queues, self.client.max_offset)

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap:
        """Per queue, the first offset stored at or after the time (the max offset if none is)."""
        return self._each(queues, lambda address, q: self.client.search_offset(address, q, timestamp_ms, Boundary.LOWER))

    def stored_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
        group = self.options.consumer_group
        if group is None:
            raise ConfigurationError(CONSUMER_GROUP, f"is required with {STARTING_OFFSETS}=group",
                                     "Set the group whose stored offsets to start from, or another startingOffsets")
        return self._each(queues, lambda address, q: self.client.query_consumer_offset(address, q, group))

    def commit(self, offsets: Mapping[MessageQueue, int]) -> OffsetMap:
        """Store each queue's next offset to read for the group; return what was stored.

        One attempt each, and only on queues whose broker is routable now: what is left out is
        stored at a later trigger, which is better than holding up this one.
        """
        routable = {q: offset for q, offset in offsets.items() if q in self._addresses}
        self._each(routable, lambda address, q: self._store(address, q, routable[q]), retry=False)
        return routable

    def _store(self, address: str, queue: MessageQueue, offset: int) -> None:
        group = self.options.consumer_group
        assert group is not None
        try:
            self.client.update_consumer_offset(address, queue, group, offset)
        except BrokerResponseError as err:
            if err.code != codes.ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            # A broker refuses offsets of a group it has never seen, and creates the group on its
            # first pull (autoCreateSubscriptionGroup). An empty pull at the offset costs nothing.
            self.client.pull(address, queue, offset, group=group, max_messages=1,
                             subscription=self.options.sub_expression,
                             expression_type=self.options.expression_type)
            self.client.update_consumer_offset(address, queue, group, offset)

    # ----------------------------------------------------------------- starts

    def starting_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        """Where a new query starts on each queue, by the rules of the options reference."""
        opts = self.options
        queue_list = sorted(queues)
        if opts.starting_timestamp_ms is not None:
            return self.offsets_for_time(queue_list, opts.starting_timestamp_ms)
        if opts.starting_mode is StartingMode.EARLIEST:
            return self.min_offsets(queue_list)
        if opts.starting_mode is StartingMode.LATEST:
            return self.max_offsets(queue_list)
        explicit: OffsetMap = {}
        if opts.starting_mode is StartingMode.SPECIFIC:
            missing = sorted(set(opts.starting_offsets) - set(queue_list))
            if missing:
                raise ConfigurationError(
                    STARTING_OFFSETS, f"names queues that do not exist: {', '.join(map(str, missing))}",
                    f"Use queues of the route: {', '.join(map(str, queue_list))}")
            explicit = dict(opts.starting_offsets)
        rest = [q for q in queue_list if q not in explicit]
        return {**explicit, **self.group_offsets(rest)}

    def group_offsets(self, queues: list[MessageQueue]) -> OffsetMap:
        """The group's stored offset, or the consumeFromWhere fallback where none is stored."""
        if not queues:
            return {}
        stored = self.stored_offsets(queues)
        unstored = [q for q, offset in stored.items() if offset is None]
        fallback = self.fallback_offsets(unstored)
        if unstored:
            log.info("no stored offset for group %s on %d queue(s); %s applies",
                     self.options.consumer_group, len(unstored), self.options.consume_from_where.value)
        return {q: offset if offset is not None else fallback[q] for q, offset in stored.items()}

    def fallback_offsets(self, queues: list[MessageQueue]) -> OffsetMap:
        if not queues:
            return {}
        where = self.options.consume_from_where
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return self.min_offsets(queues)
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            return self.offsets_for_time(queues, self.options.consume_timestamp_ms)
        return self.max_offsets(queues)
