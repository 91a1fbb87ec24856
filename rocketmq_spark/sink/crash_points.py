"""Named moments of the exactly-once protocol at which a fault test kills the driver or a task.

Each is logged at debug level. A process whose environment names one in ``PAUSE_AT_ENV`` stops
there for good once it reaches it, after writing the point's name to the file
``PAUSED_FILE_ENV`` names: the test waits for that file, so the kill it sends lands at that
moment and not near it. Nothing else reads these variables; unset, a point costs one lookup.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

PAUSE_AT_ENV = "ROCKETMQ_SPARK_PAUSE_AT"
PAUSED_FILE_ENV = "ROCKETMQ_SPARK_PAUSED_FILE"


class Point(enum.Enum):
    SENDING = "sending"  # a task stored its first half; the batch has no decision
    DECIDED = "decided"  # the decision is recorded; no half of it is committed yet
    DONE = "done"  # every half committed and the batch recorded done; Spark's commit log not written


def reached(point: Point) -> None:
    """The protocol is at ``point``: stop here for good if a fault test asked for it."""
    log.debug("exactly-once: %s", point.value)
    if os.environ.get(PAUSE_AT_ENV) != point.value:
        return
    log.warning("exactly-once: paused at '%s' for a fault test (%s); waiting to be killed", point.value, PAUSE_AT_ENV)
    marker = os.environ.get(PAUSED_FILE_ENV)
    if marker:
        Path(marker).write_text(point.value)
    threading.Event().wait()
