"""The exactly-once sink's commit against a broker that stalls instead of dying: SIGSTOPped once
the batch's decision is recorded, as a long GC pause or a hung host would leave it, and let go on
while the commit, its COMMITs timed out, is looking up which halves are stored. The COMMITs the
broker received before it stalled are then put after it comes back, beside the lookup's own
requests; the commit must go on, and what RocketMQ's Java consumer finds at the end must still be
each row once.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from integration.constants import POLL_S
from integration.support import ClusterHandle
from integration.tests.test_exactly_once import java_bodies
from integration.tests.test_exactly_once_crashes import (  # noqa: F401  (eo_brokers: the module's cluster)
    COMMIT_FAILS_WITHIN_S,
    KILLED_BROKER,
    across_both_brokers,
    batch_state,
    eo_brokers,
    halves_on,
    paused_at_decision,
    raised,
)
from rocketmq_spark.sink.decisions import State

pytestmark = pytest.mark.integration

# What the driver logs when its COMMITs failed, with the pause before its lookup
# (``Committer._commit``).
RETRYING = re.compile(r"looking up which halves are stored in (\d+) s")
# About 1,000 halves on the stalled broker: more COMMITs than the commit has in flight at once
# (END_WINDOW), whose failure must cost one request timeout, not one for each window of them
# (the commit's 60 s would run out before its retry).
STALLED_ROWS = 2000
# How long after that pause the broker comes back: the lookup's first request to it is then
# waiting for its answer, as the stalled broker's queued COMMITs are.
INTO_THE_LOOKUP_S = 1.0


@pytest.mark.eo_faults
def test_a_broker_stalled_while_the_driver_commits_publishes_each_row_once(
    eo_brokers: ClusterHandle,  # noqa: F811  (the fixture imported above)
    unique: Any,
    tmp_path: Path,
) -> None:
    """broker-a holds part of the target and is frozen at the decision; the driver's COMMITs to it
    time out, and it is thawed just after the commit's pause, with the lookup's request in flight.
    A lookup answered before the queued COMMITs are put would say their halves are not stored,
    and COMMITting them again would store those rows twice."""
    handle = eo_brokers
    cluster = handle.started
    copy, records, _ = across_both_brokers(handle, unique, "eo-stall", STALLED_ROWS, tmp_path)
    target = copy["sink"]["topic"]
    driver, number, decision, resume = paused_at_decision(handle, copy, records, tmp_path)
    try:
        on_stalled = halves_on(decision, KILLED_BROKER)
        assert on_stalled > 0, f"no decided half lies on {KILLED_BROKER}: the stall would miss the commit"
        cluster.freeze(KILLED_BROKER)
        try:
            resume.touch()
            deadline = time.monotonic() + COMMIT_FAILS_WITHIN_S
            while not (said := RETRYING.search(driver.notices())) and time.monotonic() < deadline:
                assert not driver.answered(number), f"the commit ended with a broker frozen:\n{driver.notices()}"
                time.sleep(POLL_S)
            assert said, f"the commit did not retry at the frozen broker:\n{driver.notices()}"
            time.sleep(float(said.group(1)) + INTO_THE_LOOKUP_S)
        finally:
            cluster.thaw(KILLED_BROKER)
        thawed = time.monotonic()
        answer = driver.answer(number)
        print(f"{KILLED_BROKER} frozen with {on_stalled} of {decision.count} halves on it; thawed into the lookup")
        print(f"the commit answered {time.monotonic() - thawed:.1f} s after the thaw")
    finally:
        driver.end()
    said_error = f": {raised(answer['error']['message'])}" if "error" in answer else ""
    assert "error" not in answer, f"the commit did not go on once {KILLED_BROKER} was back{said_error}"
    state, _ = batch_state(records)
    assert state is State.DONE
    assert java_bodies(handle, target, STALLED_ROWS) == sorted(f"row-{i}" for i in range(STALLED_ROWS))
