"""Paths, units, the log line and the SIGTERM handling every benchmark module shares."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
KIB = 1024


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """A SIGTERM (make's, a CI runner's) exits through ``finally`` blocks, which stop the
    benchmark's RocketMQ and Spark instead of leaving them running."""
    signal.signal(signal.SIGTERM, _terminate)
