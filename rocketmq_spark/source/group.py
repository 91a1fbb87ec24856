"""The stream's consumer group on the brokers: made visible while the group is the stream's alone,
and watched for other members.

Why register at all: a broker lists a group in ``mqadmin consumerProgress -g`` only once the group
has a ``%RETRY%`` topic, which only a heartbeat creates, and the dashboard shows a group without a
registered member as having no online consumer. So the stream's driver sends heartbeats as a Java
pull consumer does (``CONSUME_ACTIVELY``, clustering), to every broker of its topics, every
``membership.HEARTBEAT_INTERVAL_S``, on the connections it keeps open anyway.

Why only while no one else is registered: a heartbeat into a group with push consumers makes the
broker notify them, and each rebalances with the stream's client among the members, leaving the
"share" of queues it assigns to the stream unconsumed; it would also replace the group's
subscription with the stream's. So before each heartbeat the group's members are listed; while
anyone else is there the stream does not register (and leaves at once if it had), and says so.

Sharing a group is a mistake either way: a push or pull consumer of the group and the stream
store offsets for the same queues, and each one's commits overwrite the other's. Another stream
of this source is told apart by its client id (``<ip>@rocketmq-spark-<id>``). The first finding
is a warning, or with ``failOnSharedGroup`` an error raised before the first batch (or at the
next trigger, if a member joins later).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import now_ms
from rocketmq_spark.remoting import membership
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.connection import local_ip
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.membership import HEARTBEAT_INTERVAL_S, SOURCE_CLIENT_MARK, Subscription, is_source_client
from rocketmq_spark.source.option_model import CONSUMER_GROUP, FAIL_ON_SHARED_GROUP, SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long stop() waits for a round in progress before leaving the group all the same.
STOP_WAIT_S = 5.0


class Caller(Protocol):
    """What the watch needs of ``RocketMQClient``."""

    def call_many(self, addressed: Sequence[tuple[str, Call[T]]]) -> list[T | RocketMQError]: ...


def new_client_id(name_server: str) -> str:
    """A client id unique to one stream and recognisable as this source's."""
    return f"{local_ip(name_server)}{SOURCE_CLIENT_MARK}{uuid.uuid4().hex}"


def sharing_problem(group: str, others: Iterable[str]) -> str:
    """What sharing the group with these members means, naming them."""
    queries = sorted(c for c in others if is_source_client(c))
    consumers = sorted(c for c in others if not is_source_client(c))
    parts = []
    if consumers:
        parts.append(
            f"consumer group '{group}' has other consumers online ({', '.join(consumers)}): they and "
            "this query both read its queues and store offsets for them, and overwrite each other's, "
            "so after a restart either may skip or re-read messages"
        )
    if queries:
        parts.append(
            f"another query of this source reads with consumer group '{group}' ({', '.join(queries)}): "
            "both queries store offsets for the same queues and overwrite each other's"
        )
    return "; ".join(parts)


SHARING_FIX = (
    f"Give this query a consumer group of its own (option {CONSUMER_GROUP}), or stop the other members; "
    f"{FAIL_ON_SHARED_GROUP}=true makes this an error, false (the default) a warning"
)


class GroupWatch:
    """Registers the stream in its group while it is alone there, and reports other members.

    ``start()`` runs one round at once (listing, then registering or not) and raises with
    ``failOnSharedGroup`` if others are there; a daemon thread then runs a round every
    ``interval_s`` (the heartbeat's pace: a consumer that joins the group is noticed, and the stream
    leaves it, within one) until ``stop()``, which leaves the group. A round that fails (a broker
    restarting) is simply the next round's to do: a heartbeat registers again wherever the
    broker forgot the stream.
    """

    def __init__(
        self,
        client: Caller,
        options: SourceOptions,
        brokers: Callable[[], Iterable[str]],
        *,
        client_id: str | None = None,
        interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        assert options.consumer_group is not None
        self.group = options.consumer_group
        self.client_id = client_id or new_client_id(options.client.name_servers[0])
        self._client = client
        self._brokers = brokers
        self._fail = options.fail_on_shared_group
        self._interval_s = interval_s
        tags = options.tag_filter
        self.subscriptions = [
            Subscription(topic, options.sub_expression, options.expression_type, tags) for topic in options.topics
        ]
        self._consume_from_where = options.consume_from_where.value
        self.sub_version = now_ms()
        self._registered: set[str] = set()  # addresses where the last heartbeat was accepted
        self._reported: frozenset[str] = frozenset()
        self._error: ConfigurationError | None = None
        self._failing = False
        self._lock = threading.Lock()  # one round at a time: the thread's, or stop()'s leaving
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def registered(self) -> frozenset[str]:
        """Where the stream is registered now (broker or proxy addresses)."""
        return frozenset(self._registered)

    @property
    def shared(self) -> bool:
        """Whether others were registered in the group at the last round."""
        return bool(self._reported)

    def start(self) -> None:
        self.round()
        self.check()
        self._thread = threading.Thread(target=self._run, name=f"rocketmq-group-{self.group}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise the sharing error, if ``failOnSharedGroup`` is set and the group is shared."""
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop the rounds and leave the group wherever the stream is registered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
        with self._lock:
            self._leave()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.round()
            except Exception:  # the thread must outlive any one round's surprise
                log.warning(
                    "consumer group %s: a membership round failed; the next one tries again", self.group, exc_info=True
                )

    def round(self) -> None:
        """List the group's members on every broker; register where the stream is alone, else leave."""
        with self._lock:
            if self._stop.is_set():
                return
            addresses = sorted(set(self._brokers()))
            answers = self._ask([(a, membership.consumer_ids(self.group)) for a in addresses], "list the members of")
            others = frozenset(c for ids in answers.values() for c in ids if c != self.client_id)
            self._judge(others)
            if others:
                self._leave()
                return
            call = membership.heartbeat(
                self.client_id,
                self.group,
                self.subscriptions,
                consume_from_where=self._consume_from_where,
                sub_version=self.sub_version,
            )
            beaten = self._ask([(a, call) for a in answers], "register in")
            self._registered = set(beaten)

    def _judge(self, others: frozenset[str]) -> None:
        """Report members not reported yet, and the group's becoming the stream's alone again."""
        new = others - self._reported
        if new:
            problem = sharing_problem(self.group, others)
            if self._fail:
                self._error = ConfigurationError(CONSUMER_GROUP, problem, SHARING_FIX)
            log.warning("%s. %s", problem, SHARING_FIX)
        elif self._reported and not others:
            log.warning("consumer group '%s' has no other member now; this query registers in it again", self.group)
        self._reported = others

    def _leave(self) -> None:
        if self._registered:
            self._ask(
                [(a, membership.unregister(self.client_id, self.group)) for a in sorted(self._registered)], "leave"
            )
            self._registered = set()

    def _ask(self, addressed: list[tuple[str, Call[T]]], what: str) -> dict[str, T]:
        """Each address's answer; a failure is logged once (then until the next success at debug)."""
        answers: dict[str, T] = {}
        for (address, _), outcome in zip(addressed, self._client.call_many(addressed)):
            if isinstance(outcome, RocketMQError):
                level = logging.DEBUG if self._failing else logging.WARNING
                log.log(
                    level,
                    "consumer group %s: could not %s it on %s (%s); trying again in %.0f s",
                    self.group,
                    what,
                    address,
                    outcome,
                    self._interval_s,
                )
                self._failing = True
            else:
                answers[address] = outcome
        if answers and len(answers) == len(addressed):
            self._failing = False
        return answers
