"""Fixtures more than one unit test module uses."""

from __future__ import annotations

import pytest

from rocketmq_spark.source import stream_reader

# Where the stream reader's clock starts, in epoch ms.
CLOCK_START_MS = 1_700_000_000_000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The stream reader's clock, in epoch ms, moved by the test."""
    now = [CLOCK_START_MS]
    monkeypatch.setattr(stream_reader, "now_ms", lambda: now[0])
    return now
