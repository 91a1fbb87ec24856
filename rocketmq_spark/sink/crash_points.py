"""Named moments of the exactly-once protocol at which a fault test kills the driver or a task.

Each is logged at debug level. A process whose environment names one in ``PAUSE_AT_ENV`` stops
there once it reaches it, after writing the point's name to the file ``PAUSED_FILE_ENV`` names:
the test waits for that file, so the kill it sends lands at that moment and not near it. The
stop is for good, unless ``RESUME_FILE_ENV`` names a file: then the process goes on once that
file exists, so a test can break something else (kill a broker) at that moment and watch the
protocol meet it. Nothing else reads these variables; unset, a point costs one lookup.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

PAUSE_AT_ENV = "ROCKETMQ_SPARK_PAUSE_AT"
PAUSED_FILE_ENV = "ROCKETMQ_SPARK_PAUSED_FILE"
RESUME_FILE_ENV = "ROCKETMQ_SPARK_RESUME_FILE"
# How often a paused process looks for its resume file: well under what a test's steps take.
RESUME_POLL_S = 0.1


class Point(enum.Enum):
    SENDING = "sending"  # a task stored its first half; the batch has no decision
    DECIDED = "decided"  # the decision is recorded; no half of it is committed yet
    DONE = "done"  # every half committed and the batch recorded done; Spark's commit log not written


def reached(point: Point) -> None:
    """The protocol is at ``point``: stop here if a fault test asked for it, for good or until
    its resume file exists."""
    log.debug("exactly-once: %s", point.value)
    if os.environ.get(PAUSE_AT_ENV) != point.value:
        return
    resume = os.environ.get(RESUME_FILE_ENV)
    log.warning(
        "exactly-once: paused at '%s' for a fault test (%s); waiting %s",
        point.value,
        PAUSE_AT_ENV,
        f"for {resume}" if resume else "to be killed",
    )
    marker = os.environ.get(PAUSED_FILE_ENV)
    if marker:
        Path(marker).write_text(point.value)
    if not resume:
        threading.Event().wait()  # never set: stopped until killed
        return
    go_on = Path(resume)
    while not go_on.exists():
        time.sleep(RESUME_POLL_S)
    log.warning("exactly-once: resumed at '%s' (%s exists)", point.value, resume)
