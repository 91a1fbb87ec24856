"""An operator's reset of the stream's consumer group: how the driver learns of it, and what the
next micro-batch does about it (``onOffsetReset``). Pure functions, and one thread-safe inbox.

How each release tells a running stream (docs/offsets.md has the measured detail):

- 5.x brokers (``useServerSideResetOffset``, the default) write the reset offsets as the group's
  stored offsets and answer the group's next pull on each queue with OFFSET_MOVED once; they send
  the members nothing. The driver sees it as stored offsets that differ from what it stored last.
- 4.9 brokers store nothing: they send RESET_CONSUMER_CLIENT_OFFSET to the group's online members,
  which store the offsets themselves. With no member online, mqadmin writes the stored offsets
  itself, which the first way sees.

A followed reset travels in the end offsets Spark logs for the batch (``offsets.RESETS_KEY``), so
the batch reads the same rows when it is run again, and a restart neither loses nor repeats it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import OffsetResetError
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import ON_OFFSET_RESET, OnOffsetReset


class ResetInbox:
    """Resets the brokers announced, kept until the driver plans its next batch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: OffsetMap = {}

    def put(self, offsets: Mapping[MessageQueue, int]) -> None:
        with self._lock:
            self._offsets.update(offsets)

    def take(self) -> OffsetMap:
        with self._lock:
            taken, self._offsets = self._offsets, {}
        return taken


def moved(stored_by_us: Mapping[MessageQueue, int], stored_now: Mapping[MessageQueue, int]) -> OffsetMap:
    """Queues whose stored offset on the broker is no longer the one the stream stored last:
    someone else (an operator's tool) wrote it. Queues the broker did not answer for are left out."""
    return {q: offset for q, offset in stored_now.items() if q in stored_by_us and stored_by_us[q] != offset}


def describe(resets: Mapping[MessageQueue, int], position: Mapping[MessageQueue, int]) -> str:
    """``topic/broker/queue: 50 -> 25`` per reset queue, in queue order."""
    return ", ".join(f"{q}: {position[q] if q in position else '?'} -> {resets[q]}" for q in sorted(resets))


def apply(
    policy: OnOffsetReset, group: str, start: Mapping[MessageQueue, int], resets: Mapping[MessageQueue, int]
) -> OffsetMap:
    """The resets the next batch follows (its queues start there): all of them with ``follow``,
    none with ``ignore``; ``fail`` raises an error naming the queues, offsets and the option.
    Resets of queues the stream does not read, or to where it stands, change nothing."""
    relevant = {q: o for q, o in resets.items() if q in start and start[q] != o}
    if relevant and policy is OnOffsetReset.FAIL:
        raise OffsetResetError(
            f"the offsets of consumer group '{group}' were reset by an operator ({describe(relevant, start)}), "
            f"and {ON_OFFSET_RESET}=fail stops the query: restart it with {ON_OFFSET_RESET}=follow to read from the "
            f"reset offsets, or {ON_OFFSET_RESET}=ignore to go on from the checkpoint"
        )
    return relevant if policy is OnOffsetReset.FOLLOW else {}
