"""Offsets from the brokers, on the driver: routes, min/max offsets, stored offsets, search by time.

The micro-batch and batch readers ask this module every question that needs a broker; it decides
no policy (where a query starts is ``starts.py``, what counts as data loss ``planning.py``).
Per-queue requests go out in parallel, since a topic on several brokers has dozens of queues and
each question is one round trip per queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import Boundary, RocketMQClient
from rocketmq_spark.remoting.errors import BrokerResponseError, ConfigurationError, TopicNotFoundError
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.options import STARTING_OFFSETS, TOPIC, SourceOptions

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

    def stored_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int | None]:
        """The group's stored offset per queue; None where it has stored none."""
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
