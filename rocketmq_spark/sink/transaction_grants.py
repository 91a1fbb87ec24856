"""What an exactly-once writer needs granted, in the grant line of a refusal.

A refusal's grant line (``remoting.grants``) asks for what a plain reader or writer needs on the
resource, and ``mqadmin createAcl`` replaces what the user holds there: followed as printed, the
line for a writer's missing ``Get`` would take its ``Pub`` away. Exactly once needs more: every
topic it writes and its transaction topic are sent to (``Pub``), read back from (``Sub``: recovery
looks for stored halves, the records are pulled) and asked for their ends (``Get``); the producer
group pulls and locks (``Sub``); recovery pulls the half topic (``Sub``). Measured against 5.3.3's
ACL 2.0 and 4.9.7's plain ACL (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rocketmq_spark.remoting.errors import AuthorizationError, RocketMQError
from rocketmq_spark.remoting.grants import GET, GROUP, PUB, SUB, TOPIC
from rocketmq_spark.sink.commit import HALF_TOPIC

TOPIC_NEEDS = (PUB, SUB, GET)
GROUP_NEEDS = (SUB,)
HALF_TOPIC_NEEDS = (SUB,)


def needs(resource_type: str, name: str) -> tuple[str, ...]:
    """What exactly once needs on one resource: the half topic, a group (the producer group), or
    any other topic (a target, or the transaction topic)."""
    if resource_type == GROUP:
        return GROUP_NEEDS
    if resource_type == TOPIC:
        return HALF_TOPIC_NEEDS if name == HALF_TOPIC else TOPIC_NEEDS
    return ()


def _refusal(error: BaseException) -> AuthorizationError | None:
    """The refusal an error is, or was caused by (a failed send, a failed commit)."""
    link: BaseException | None = error
    while link is not None and not isinstance(link, AuthorizationError):
        link = link.__cause__
    return link


@contextmanager
def granted_as_exactly_once() -> Iterator[None]:
    """Let a refusal, and every error that carries its words, ask for what exactly once needs on
    its resource; other errors pass unchanged."""
    try:
        yield
    except RocketMQError as err:
        refusal = _refusal(err)
        wanted = needs(refusal.denial.resource_type, refusal.denial.name) if refusal is not None else ()
        if refusal is None or not wanted:
            raise
        before = refusal.denial.advice()
        refusal.denial = refusal.denial.widened(wanted)
        after = refusal.denial.advice()
        link: BaseException | None = err
        while link is not None:
            link.args = tuple(a.replace(before, after) if isinstance(a, str) else a for a in link.args)
            link = None if link is refusal else link.__cause__
        raise
