"""Which queue a row goes to, as RocketMQ's Java producer chooses.

- An explicit queue (``brokerName`` and ``queueId``) is taken as it is.
- A ``shardingKey`` picks from the publish list (``TopicRoute.publish_queues``) what Java's
  ``SelectMessageQueueByHash`` picks: the key's ``String.hashCode``, Java's remainder by the
  list's length (the dividend's sign), then its absolute value.
- Any other row goes round-robin over the publish list, passing over a broker name whose master
  failed lately and, for a retry, the one that just failed. How long a failed address is passed
  over is the cluster view's one memory of failures (``remoting.replicas``: ``PASSED_OVER_S``, ten
  seconds, as the Java producer's send fault tolerance isolates a broker), which reads share.

Only brokers that list a master are in the publish list: sends go to masters.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import TopicNotFoundError
from rocketmq_spark.remoting.membership import java_string_hash
from rocketmq_spark.remoting.route import TopicRoute
from rocketmq_spark.sink.messages import Row, RowError

# How long a task uses a route it asked for before asking the shared routes again: a row costs
# no lock then, and a new route (refreshed every few seconds, or after a failure) is seen soon.
ROUTE_REUSE_S = 0.5


class RouteSource(Protocol):
    """What the picker needs of ``remoting.replicas.Replicas``: the topic's current route, and
    whether an address failed lately."""

    def route(self, topic: str, suspect: bool = False) -> TopicRoute: ...

    def passed_over(self, address: str) -> bool: ...


def hashed_queue(queues: list[MessageQueue], key: str) -> MessageQueue:
    """``SelectMessageQueueByHash``: Java's ``abs(key.hashCode() % size)``."""
    return queues[abs(java_string_hash(key)) % len(queues)]


class QueuePicker:
    """Chooses each row's queue; one per task (its round-robin position is the task's own)."""

    def __init__(self, routes: RouteSource, clock: Callable[[], float] = time.monotonic) -> None:
        self._routes = routes
        self._clock = clock
        self._next = random.randrange(1 << 16)  # tasks start at different queues, as Java's threads do
        # topic -> (the route, its publish list, the master's address of each queue's broker)
        self._publish: dict[str, tuple[TopicRoute, list[MessageQueue], list[str | None]]] = {}
        self._recent: dict[str, tuple[float, TopicRoute]] = {}  # topic -> (until when, route)

    def route(self, topic: str, suspect: bool = False) -> TopicRoute:
        """The topic's route, reused for ``ROUTE_REUSE_S`` unless ``suspect`` (a send failed):
        then the shared routes are asked, which ask the name server again once their limit
        (``MIN_ROUTE_REFRESH_S``) allows, so a failed send sees a new route within a second."""
        now = self._clock()
        recent = self._recent.get(topic)
        if recent is not None and recent[0] > now and not suspect:
            return recent[1]
        try:
            route = self._routes.route(topic, suspect)
        except TopicNotFoundError as err:
            raise RowError(
                f"topic {topic} does not exist ({err}). The sink creates no topics: create it first "
                "(mqadmin updateTopic), or write to a topic that exists"
            ) from err
        self._recent[topic] = (now + ROUTE_REUSE_S, route)
        return route

    def master(self, queue: MessageQueue) -> str | None:
        """The address of the queue's broker's master, where its sends go (None while it has none)."""
        return self.route(queue.topic).master_address(queue.broker_name)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's publish list, computed once per route the name server gave."""
        return self._published(topic)[0]

    def _published(self, topic: str) -> tuple[list[MessageQueue], list[str | None]]:
        """The publish list and, in the same order, the master's address of each queue's broker."""
        route = self.route(topic)
        known = self._publish.get(topic)
        if known is not None and known[0] is route:
            return known[1], known[2]
        queues = route.publish_queues()
        if not queues:
            raise RowError(
                f"topic {topic} has no writable queue on a broker with a master now. Check the topic's "
                "permission and that its brokers' masters run"
            )
        masters = [route.master_address(q.broker_name) for q in queues]
        self._publish[topic] = (route, queues, masters)
        return queues, masters

    def _down(self, masters: list[str | None]) -> set[str | None]:
        """The masters among ``masters`` that failed lately (a send, or any other request)."""
        return {a for a in set(masters) if a is not None and self._routes.passed_over(a)}

    def pick(self, row: Row, avoid: str | None = None) -> MessageQueue:
        """The row's queue; ``avoid``: a broker name an unordered row's retry should not go back to."""
        if row.broker_name is not None and row.queue_id is not None:
            return self._explicit(row)
        if row.sharding_key is not None:
            return hashed_queue(self.publish_queues(row.topic), row.sharding_key)
        return self.next_queue(row.topic, avoid)

    def next_queue(self, topic: str, avoid: str | None = None) -> MessageQueue:
        """An unordered message's queue: the next in turn whose broker did not fail lately."""
        queues, masters = self._published(topic)
        down = self._down(masters)
        count = len(queues)
        for step in range(count):
            index = (self._next + step) % count
            if queues[index].broker_name != avoid and masters[index] not in down:
                self._next += step + 1
                return queues[index]
        self._next += 1  # every broker failed lately: take turns all the same
        return queues[self._next % count]

    def spread(self, topic: str, count: int) -> tuple[list[MessageQueue], np.ndarray]:
        """The queues of ``count`` unordered messages in a row: the publish list and each one's
        index in it, exactly what ``count`` calls of ``next_queue`` would give, at once."""
        queues, masters = self._published(topic)
        down = self._down(masters)
        total = len(queues)
        start = self._next % total
        turn = [(start + step) % total for step in range(total)]
        usable = np.array([i for i in turn if masters[i] not in down], dtype=np.int64)
        steps = np.arange(count, dtype=np.int64)
        if not len(usable):  # every broker failed lately: take turns all the same
            self._next += count
            return queues, (start + 1 + steps) % total
        chosen = usable[steps % len(usable)]
        if count:
            last = int(chosen[-1])
            self._next += (last - start) % total + 1 + (count - 1) // len(usable) * total
        return queues, chosen

    def _explicit(self, row: Row) -> MessageQueue:
        assert row.broker_name is not None and row.queue_id is not None
        route = self.route(row.topic)
        writes = {qd.broker_name: qd.write_queue_nums for qd in route.queue_datas if qd.writable}
        if not 0 <= row.queue_id < writes.get(row.broker_name, 0):
            raise RowError(
                f"a row of topic {row.topic} names queue {row.broker_name}/{row.queue_id}, which the route does not "
                f"list as writable (writable queues: {writes or 'none'}). Name a queue the topic has"
            )
        return MessageQueue(row.topic, row.broker_name, row.queue_id)
