"""The offset model: a queue offset per MessageQueue, and its JSON forms. No I/O.

Spark checkpoints a stream's offsets as JSON objects; users write starting and ending offsets
the same way. Both use ``{"<topic>": {"<brokerName>": {"<queueId>": <offset>}}}``, where an offset
is always the next offset to read (ranges are ``[start, end)``).

The end offsets of a batch that follows an operator's reset also carry, under ``RESETS_KEY``, where
each reset queue starts in that batch (in the same nested form): the batch then reads from there
rather than from the previous batch's end, and reads the same rows whenever it is run again.
Likewise, under ``STARTS_KEY``, where the batch starts each queue it is the first to read (a queue
added to the topic, or whose broker came back): the rule that chose it asks the brokers things that
change (the group's stored offsets), so the batch must not ask them again when it is run again.
Under ``STAMPS_KEY``, per broker name, the store time of the newest message the driver had seen on
it when it planned the batch: every message below the batch's ends on that broker name was stored
by then. A restarted query compares it with what the brokers hold then, to find messages a new
master stored at offsets the query had read or planned (``failovers.py``), and a task checks what
it reads against it (``rows.py``): a later message was stored after the batch was planned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rocketmq_spark.config.cluster import with_namespace
from rocketmq_spark.model import MessageQueue

OffsetMap = dict[MessageQueue, int]
# Not a possible topic name: RocketMQ's topic names are letters, digits, '%', '|', '_' and '-'.
RESETS_KEY = "@resets"
STARTS_KEY = "@starts"
STAMPS_KEY = "@stamps"
_METADATA_KEYS = frozenset({RESETS_KEY, STARTS_KEY, STAMPS_KEY})
# A broker takes a message's store time before it orders the concurrent sends of a queue, so a
# message can be stored a few milliseconds "before" the one below it. Only a message stored more
# than this after a stamp counts as stored after it; a new master's own messages come an election
# later (seconds: 13 to 23 s for a DLedger group in docs/operations.md).
STORE_TIME_SLACK_MS = 1_000


def to_spark(
    offsets: Mapping[MessageQueue, int],
    resets: Mapping[MessageQueue, int] | None = None,
    starts: Mapping[MessageQueue, int] | None = None,
    stamps: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The nested dict Spark stores in its offset log (string keys, sorted for stable JSON), with
    the batch's followed resets, the starts of the queues it reads first and its brokers' newest
    store times, if any."""
    out: dict[str, Any] = {}
    for queue in sorted(offsets):
        out.setdefault(queue.topic, {}).setdefault(queue.broker_name, {})[str(queue.queue_id)] = offsets[queue]
    if resets:
        out[RESETS_KEY] = to_spark(resets)
    if starts:
        out[STARTS_KEY] = to_spark(starts)
    if stamps:
        out[STAMPS_KEY] = {broker: stamps[broker] for broker in sorted(stamps)}
    return out


def stamps_of(ends: Mapping[MessageQueue, int], last_stored: Mapping[MessageQueue, tuple[int, int]]) -> dict[str, int]:
    """Per broker name of a batch ending at ``ends``, the store time of the newest message seen on
    it (``last_stored``: per queue its max offset and its last message's store time): every
    message below the batch's ends was stored no later (``Failovers.since``, ``rows.py``). A
    broker name with a queue whose store time is not known up to its end has none."""
    stamps: dict[str, int] = {}
    unknown = set()
    for queue, end in ends.items():
        max_offset, stored_ms = last_stored.get(queue, (0, 0))
        if max_offset < end:
            unknown.add(queue.broker_name)
        elif end > 0:
            stamps[queue.broker_name] = max(stored_ms, stamps.get(queue.broker_name, 0))
    return {broker: ms for broker, ms in stamps.items() if broker not in unknown}


def starts_from_spark(nested: Mapping[str, Any]) -> OffsetMap:
    """Where the batch ending at ``nested`` starts the queues it is the first to read."""
    return from_spark(nested.get(STARTS_KEY) or {})


def resets_from_spark(nested: Mapping[str, Any]) -> OffsetMap:
    """Where the batch ending at ``nested`` starts each queue an operator's reset moved."""
    return from_spark(nested.get(RESETS_KEY) or {})


def stamps_from_spark(nested: Mapping[str, Any]) -> dict[str, int]:
    """Per broker name, the newest store time seen when the batch ending at ``nested`` was planned
    (none in an offset log written before they were kept)."""
    stamps = nested.get(STAMPS_KEY) or {}
    if not isinstance(stamps, Mapping):
        return {}
    return {str(b): t for b, t in stamps.items() if isinstance(t, int) and not isinstance(t, bool) and t > 0}


def from_spark(nested: Mapping[str, Any], namespace: str | None = None) -> OffsetMap:
    """The inverse of ``to_spark``; raises ValueError on anything that is not that shape."""
    if not isinstance(nested, Mapping):
        raise ValueError("the top level must be an object of topics")
    offsets: OffsetMap = {}
    for topic, brokers in nested.items():
        if topic in _METADATA_KEYS:
            continue
        if not isinstance(brokers, Mapping):
            raise ValueError(f"topic '{topic}' must map broker names to objects of queue ids")
        full_topic = with_namespace(topic, namespace)
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise ValueError(f"broker '{broker}' of topic '{topic}' must map queue ids to offsets")
            for queue_id, offset in queues.items():
                if not str(queue_id).isdigit():
                    raise ValueError(f"queue id '{queue_id}' of {topic}/{broker} is not a whole number")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise ValueError(f"offset {offset!r} of {topic}/{broker}/{queue_id} is not a whole number >= 0")
                offsets[MessageQueue(full_topic, str(broker), int(queue_id))] = offset
    return offsets


def parse_offset_json(text: str, namespace: str | None = None) -> OffsetMap:
    """Offsets a user wrote as JSON; raises ValueError saying what is wrong."""
    try:
        nested = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err}") from err
    return from_spark(nested, namespace)
