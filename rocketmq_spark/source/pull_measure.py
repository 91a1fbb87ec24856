"""Queue offsets measured by pulls, for a user who may subscribe to a topic but not ``Get`` it.

ACL 2.0 (RocketMQ 5.3+) asks ``Get`` on the topic for GET_MAX_OFFSET, GET_MIN_OFFSET and topic
stats, but only ``Sub`` for a pull, and every pull's answer carries the queue's min and max
offsets in its header. RocketMQ's own subscribing consumers never ask for ``Get`` when they start
from stored offsets or from the first one: a platform team that grants only ``Sub`` must not find
the source needing more. So where the broker refuses the topic's ``Get``, the offsets come from a
pull of one message per queue, warned once per topic (it costs a request per queue per trigger
instead of one per broker, and moves up to a message per queue).

Each queue is pulled at its last known max offset: there the broker answers without a complaint
(no new message, or the next one), where an offset below its min would be logged on the broker
as moved. A time search has no such stand-in: it needs ``Get`` and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.calls import Call, PullResult
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import AuthorizationError, BrokerResponseError, RocketMQError
from rocketmq_spark.remoting.grants import GET, TOPIC

log = logging.getLogger(__name__)

# Enough for the header's offsets; the message that may come with them is dropped.
PROBE_MESSAGES = 1
# Answers to topic or consume stats that mean "ask queue by queue": a proxy serves neither, and a
# user without Get is refused both.
_NO_STATS = frozenset({ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.NO_PERMISSION})


def no_stats(outcome: object, warned: Callable[[RocketMQError], None] | None = None) -> bool:
    """Whether a broker's answer to topic or consume stats sends the question queue by queue;
    ``warned`` is told of a refused grant (a proxy's refusal is no news)."""
    if not isinstance(outcome, BrokerResponseError) or outcome.code not in _NO_STATS:
        return False
    if warned is not None and isinstance(outcome, AuthorizationError):
        warned(outcome)
    return True


class PullMeasure:
    """Which topics are measured by pulls, and where each of their queues is pulled next."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.topics: set[str] = set()
        self._at: dict[MessageQueue, int] = {}
        self._groups_warned: set[str] = set()

    def split(self, queues: Iterable[MessageQueue]) -> tuple[list[MessageQueue], list[MessageQueue]]:
        """The queues asked as usual, and those measured by pulls."""
        asked: list[MessageQueue] = []
        pulled: list[MessageQueue] = []
        for queue in queues:
            (pulled if queue.topic in self.topics else asked).append(queue)
        return asked, pulled

    def take(self, error: AuthorizationError, display: str) -> bool:
        """Whether the refusal is a topic's ``Get`` the pulls stand in for; if so, its topic is
        measured by pulls from now on (``display``: the topic as the user named it)."""
        denied = error.denial
        if denied.resource_type != TOPIC or denied.needed != (GET,) or denied.name in self.topics:
            return False
        self.topics.add(denied.name)
        log.warning(
            "topic '%s': the user may not Get it, so its queues' offsets are measured by a pull of one "
            "message per queue on each trigger instead of one request per broker; grant Get on "
            "Topic:%s to ask them directly (docs/security.md)",
            display,
            denied.name,
        )
        return True

    def call(self, queue: MessageQueue) -> Call[PullResult]:
        return calls.pull(calls.PullSpec(queue, self.group), self._at.get(queue, 0), PROBE_MESSAGES)

    def took(self, queue: MessageQueue, result: PullResult) -> PullResult:
        """Keeps where the queue ends for its next pull."""
        self._at[queue] = result.max_offset
        return result

    def warned_group(self, group: str) -> Callable[[RocketMQError], None]:
        """What tells, once per group, that its stored offsets are asked queue by queue because
        the user may not Get it (consume stats need Get on the group and topic)."""

        def warn(error: RocketMQError) -> None:
            if group in self._groups_warned:
                return
            self._groups_warned.add(group)
            log.warning(
                "consumer group '%s': the brokers refuse its consume stats (%s), so its stored offsets are "
                "asked queue by queue; grant Get on the group and topic to ask one per broker (docs/security.md)",
                group,
                error,
            )

        return warn
