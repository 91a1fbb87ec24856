"""Filters Spark 4.1+ pushes to a batch read, turned into what the read plans: which queues, which
offsets, which tags. Pure: the broker questions go to the caller's ``offsets_for_time``.

Spark hands ``pushFilters`` the AND-ed filters of a query and keeps whichever it gets back to
evaluate itself. A filter is kept from Spark (pushed) only where the planned read returns exactly
the rows Spark would keep:

- ``brokerName`` / ``queueId`` ``=`` and ``IN``: queues that cannot match are not read;
- ``queueOffset`` comparisons and ``=``: each queue's range is cut to them (rows are trimmed to
  their range on arrival, so the cut is exact);
- ``tags`` ``=`` and ``IN``, when the user gave no ``subExpression``: the tags become the
  subscription, and rows are checked for the exact tag on arrival already.

``storeTimestamp`` comparisons narrow each queue's range as ``startingTimestamp`` and
``endingTimestamp`` do (the first offset stored at or after a time), which is exact only while
a queue's store times do not go backwards (a broker clock set back); so Spark also gets them back
and checks the rows. ``queueOffset IN`` narrows to its lowest and highest offsets and goes back
too. Anything else goes back untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from rocketmq_spark.model import (
    EXPRESSION_TAG,
    SUBSCRIBE_ALL,
    TAG_EXPRESSION_SEPARATOR,
    MessageQueue,
    parse_tag_expression,
)
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import SourceOptions
from rocketmq_spark.source.spark_api import BOUNDS, EqualTo, Filter, In

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
# Spark's timestamps are microseconds; brokers store milliseconds.
MICROS_PER_MS = 1000

BROKER_NAME = "brokerName"
QUEUE_ID = "queueId"
QUEUE_OFFSET = "queueOffset"
TAGS = "tags"
STORE_TIMESTAMP = "storeTimestamp"


@dataclass(frozen=True)
class Pushed:
    """What the pushed filters ask of a read; None is no restriction. Offsets and store times are
    half-open: ``[offset_from, offset_until)``, stored at or after ``stored_from_ms`` and before
    ``stored_until_ms``."""

    brokers: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    offset_from: int | None = None
    offset_until: int | None = None
    stored_from_ms: int | None = None
    stored_until_ms: int | None = None
    tags: frozenset[str] | None = None

    def keeps(self, queue: MessageQueue) -> bool:
        return (self.brokers is None or queue.broker_name in self.brokers) and (
            self.queue_ids is None or queue.queue_id in self.queue_ids
        )

    def subscribed(self, options: SourceOptions) -> SourceOptions:
        """The options with the pushed tags as the subscription, if any were pushed."""
        if self.tags is None:
            return options
        return replace(options, sub_expression=TAG_EXPRESSION_SEPARATOR.join(sorted(self.tags)))

    def narrowed(
        self, start: OffsetMap, end: OffsetMap, offsets_for_time: Callable[[list[MessageQueue], int], OffsetMap]
    ) -> tuple[OffsetMap, OffsetMap]:
        """The ranges ``[start, end)`` of the queues kept, cut to the pushed offsets and times;
        a range cut to nothing ends where it starts."""
        queues = sorted(q for q in end if self.keeps(q))
        low = {q: start[q] for q in queues}
        high = {q: end[q] for q in queues}
        if self.offset_from is not None:
            low = {q: max(low[q], self.offset_from) for q in queues}
        if self.offset_until is not None:
            high = {q: min(high[q], self.offset_until) for q in queues}
        if self.stored_from_ms is not None and queues:
            first = offsets_for_time(queues, self.stored_from_ms)
            low = {q: max(low[q], first[q]) for q in queues}
        if self.stored_until_ms is not None and queues:
            first = offsets_for_time(queues, self.stored_until_ms)
            high = {q: min(high[q], first[q]) for q in queues}
        return low, {q: max(low[q], high[q]) for q in queues}


def push(filters: Sequence[Filter], options: SourceOptions) -> tuple[Pushed, list[Filter]]:
    """What the filters ask of the read, and the filters Spark must still evaluate (the very
    objects it passed, as ``pushFilters`` requires)."""
    pushed = Pushed()
    back: list[Filter] = []
    tags_allowed = options.expression_type == EXPRESSION_TAG and options.sub_expression == SUBSCRIBE_ALL
    tag_filters: list[Filter] = []
    for f in filters:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())  # not every Filter has one
        column = attribute[0] if len(attribute) == 1 else None
        values = _values(f)
        if column == BROKER_NAME and values is not None and all(isinstance(v, str) for v in values):
            pushed = replace(pushed, brokers=_both(pushed.brokers, values))
        elif column == QUEUE_ID and values is not None and all(_is_int(v) for v in values):
            pushed = replace(pushed, queue_ids=_both(pushed.queue_ids, values))
        elif column == TAGS and tags_allowed and values is not None and all(_is_tag(v) for v in values):
            pushed = replace(pushed, tags=_both(pushed.tags, values))
            tag_filters.append(f)
        elif column == QUEUE_OFFSET:
            pushed, exact = _offsets(pushed, f)
            if not exact:
                back.append(f)
        elif column == STORE_TIMESTAMP:
            pushed = _store_times(pushed, f)
            back.append(f)  # narrowed, and checked by Spark too (see the module's docstring)
        else:
            back.append(f)
    if pushed.tags is not None and not pushed.tags:  # no tag is in all of them: an empty subscription
        pushed = replace(pushed, tags=None)  # matches nothing on the broker; leave it to Spark
        back += tag_filters
    return pushed, back


def _values(f: Filter) -> frozenset[Any] | None:
    """The values an ``=`` or ``IN`` filter accepts (nulls match nothing); None for other filters."""
    if isinstance(f, EqualTo):
        return None if f.value is None else frozenset([f.value])
    if isinstance(f, In):
        return frozenset(v for v in f.value if v is not None)
    return None


def _both(known: frozenset[Any] | None, values: Iterable[Any]) -> frozenset[Any]:
    return frozenset(values) if known is None else known & frozenset(values)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_tag(value: object) -> bool:
    """A tag a subscription can name alone: not ``*``, no separator, nothing the broker trims."""
    return isinstance(value, str) and parse_tag_expression(value) == frozenset([value])


def _offsets(pushed: Pushed, f: Filter) -> tuple[Pushed, bool]:
    """The offsets a ``queueOffset`` filter allows, and whether the cut is exact."""
    if isinstance(f, In):
        offsets = [v for v in f.value if v is not None]
        if not offsets or not all(_is_int(v) for v in offsets):
            return pushed, False
        return _bounded(pushed, min(offsets), max(offsets) + 1), False
    if not _is_int(getattr(f, "value", None)):
        return pushed, False
    value: int = f.value  # type: ignore[attr-defined]
    if isinstance(f, EqualTo):
        return _bounded(pushed, value, value + 1), True
    bound = BOUNDS.get(type(f))
    if bound is None:
        return pushed, False
    lower, inclusive = bound
    if lower:
        return _bounded(pushed, value if inclusive else value + 1, None), True
    return _bounded(pushed, None, value + 1 if inclusive else value), True


def _bounded(pushed: Pushed, low: int | None, high: int | None) -> Pushed:
    if low is not None:
        pushed = replace(pushed, offset_from=low if pushed.offset_from is None else max(pushed.offset_from, low))
    if high is not None:
        pushed = replace(pushed, offset_until=high if pushed.offset_until is None else min(pushed.offset_until, high))
    return pushed


def micros(moment: datetime) -> int | None:
    """Spark's microseconds of a pushed timestamp; None for a time without a zone, whose instant
    the source cannot know."""
    if moment.tzinfo is None:
        return None
    return (moment - _EPOCH) // _MICROSECOND


def _store_times(pushed: Pushed, f: Filter) -> Pushed:
    """The store times a ``storeTimestamp`` filter allows, in the broker's milliseconds: a row
    stored at ``ms`` shows ``ms * 1000`` microseconds, so ``>= t`` keeps ``ms >= ceil(t / 1000)``,
    ``> t`` keeps ``ms >= floor(t / 1000) + 1``, ``< t`` keeps ``ms < ceil(t / 1000)`` and
    ``<= t`` keeps ``ms < floor(t / 1000) + 1``."""
    value = getattr(f, "value", None)
    at = micros(value) if isinstance(value, datetime) else None
    if at is None:
        return pushed
    ceil_ms, after_ms = -(-at // MICROS_PER_MS), at // MICROS_PER_MS + 1
    low: int | None = None
    high: int | None = None
    if isinstance(f, EqualTo):
        low, high = ceil_ms, after_ms
    elif type(f) in BOUNDS:
        lower, inclusive = BOUNDS[type(f)]
        if lower:
            low = ceil_ms if inclusive else after_ms
        else:
            high = after_ms if inclusive else ceil_ms
    if low is not None:
        pushed = replace(
            pushed, stored_from_ms=low if pushed.stored_from_ms is None else max(pushed.stored_from_ms, low)
        )
    if high is not None:
        pushed = replace(
            pushed, stored_until_ms=high if pushed.stored_until_ms is None else min(pushed.stored_until_ms, high)
        )
    return pushed
