"""The fault tests' pause points (``sink/crash_points.py``): a point not named goes straight on,
and a named one with a resume file holds its thread until that file exists."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rocketmq_spark.sink.crash_points import PAUSE_AT_ENV, PAUSED_FILE_ENV, RESUME_FILE_ENV, Point, reached

# Longer than a poll for the resume file, so a thread that ignored the pause would have gone on.
STILL_PAUSED_S = 0.5
# How long the test waits for the thread to reach the point, and to go on once resumed.
WAIT_S = 10.0
POLL_S = 0.01


def test_a_point_not_named_goes_straight_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PAUSE_AT_ENV, Point.DONE.value)
    monkeypatch.setenv(PAUSED_FILE_ENV, str(tmp_path / "paused"))
    reached(Point.DECIDED)
    assert not (tmp_path / "paused").exists()


def test_a_paused_point_goes_on_once_its_resume_file_exists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    monkeypatch.setenv(PAUSE_AT_ENV, Point.DECIDED.value)
    monkeypatch.setenv(PAUSED_FILE_ENV, str(paused))
    monkeypatch.setenv(RESUME_FILE_ENV, str(resume))
    thread = threading.Thread(target=reached, args=(Point.DECIDED,), daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    # The file may be seen empty for a moment: created, its text not written yet.
    while not (paused.exists() and paused.read_text() == Point.DECIDED.value):
        assert time.monotonic() < deadline, "the thread never said it paused at its point"
        time.sleep(POLL_S)
    thread.join(STILL_PAUSED_S)
    assert thread.is_alive(), "the thread went on without its resume file"
    resume.touch()
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the thread stayed paused after its resume file appeared"
