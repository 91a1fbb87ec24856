"""Reading the JSON that RocketMQ's servers write with fastjson. No I/O.

fastjson writes a ``Map`` whose keys are objects as an object with object keys, e.g. a topic's
offset table keyed by MessageQueue: ``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, and
older servers write integer keys bare: ``{0:"127.0.0.1:10911"}``. Neither is JSON, so this reads
any value as a key: string keys give a dict, other keys a list of ``(key, value)`` pairs with
object keys as dicts.
"""

from __future__ import annotations

import json
from typing import Any

from rocketmq_spark.remoting.errors import ProtocolError

_SCALAR = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def loads(text: str) -> Any:
    """The value of a fastjson document; raises ProtocolError for anything it cannot read."""
    try:
        value, end = _value(text, _skip(text, 0))
    except (IndexError, ValueError, RecursionError) as err:
        raise ProtocolError(f"unreadable fastjson at {err}: {text[:200]!r}") from None
    if _skip(text, end) != len(text):
        raise ProtocolError(f"trailing data after fastjson value: {text[end : end + 50]!r}")
    return value


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _expect(text: str, at: int, char: str) -> int:
    if text[at] != char:
        raise ValueError(f"offset {at}: expected {char!r}, found {text[at]!r}")
    return _skip(text, at + 1)


def _value(text: str, at: int) -> tuple[Any, int]:
    char = text[at]
    if char == "{":
        return _object(text, _skip(text, at + 1))
    if char == "[":
        items: list[Any] = []
        at = _skip(text, at + 1)
        while text[at] != "]":
            item, at = _value(text, at)
            items.append(item)
            at = _skip(text, at)
            if text[at] == ",":
                at = _skip(text, at + 1)
        return items, at + 1
    value, end = _SCALAR.raw_decode(text, at)
    return value, end


def _object(text: str, at: int) -> tuple[Any, int]:
    pairs: list[tuple[Any, Any]] = []
    while text[at] != "}":
        key, at = _value(text, at)
        at = _expect(text, _skip(text, at), ":")
        value, at = _value(text, at)
        pairs.append((key, value))
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
        elif text[at] != "}":
            raise ValueError(f"offset {at}: expected ',' or '}}', found {text[at]!r}")
    if all(isinstance(key, str) for key, _ in pairs):
        return dict(pairs), at + 1
    return pairs, at + 1
