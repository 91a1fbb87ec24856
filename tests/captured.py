"""The broker answers captured in tests/data (``integration/capture_fixtures.py`` pulled them from
a live RocketMQ 5.3.3 broker) and what the official Java consumer decoded from the same queues
(``captured.json``), by case name. The decoders' tests and the bulk decoder's both read them."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tests.records import DATA, load_hex

EXPECTATIONS = DATA / "captured.json"
LENGTH_FIELD_BYTES = 4
# The word after the frame length: serialize type in the high byte, header length below it.
HEADER_LENGTH_MASK = 0xFFFFFF


@cache
def expectations() -> dict[str, dict[str, Any]]:
    return json.loads(EXPECTATIONS.read_text(encoding="utf-8"))


def case_names() -> list[str]:
    return sorted(expectations())


def raw(case: str) -> bytes:
    return load_hex(expectations()[case]["file"])


def body(case: str) -> bytes:
    """The PULL body of a case, taken out of the frame by hand where the case is a whole frame."""
    data = raw(case)
    if not expectations()[case].get("frame"):
        return data
    header_length = int.from_bytes(data[LENGTH_FIELD_BYTES : 2 * LENGTH_FIELD_BYTES], "big") & HEADER_LENGTH_MASK
    return data[2 * LENGTH_FIELD_BYTES + header_length :]
