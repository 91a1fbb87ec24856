"""The Databricks notebook example, run as a plain script over Spark Connect, end to end.

It runs twice against a broker with ACL on (conftest's ``acl_cluster``; keys in the environment,
where the notebook reads them when it is not on Databricks), as a scheduled job would: the second run, from the same
checkpoint, writes only what arrived in between; then once more with an interval trigger, as a
notebook that keeps the stream running, until it has caught up. Every message lands once, and the group's
stored offsets end where the queues end.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, Cluster
from integration.connect import JOB_TIMEOUT_S, ConnectServer, job_env
from integration.constants import REPO, TRIGGER

pytestmark = pytest.mark.integration

NOTEBOOK = REPO / "docs" / "examples" / "databricks_notebook.py"
QUEUES = 2
FIRST_RUN = 600
SECOND_RUN = 150
THIRD_RUN = 400
PER_TRIGGER = "250"
SIGNED = ("--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)


def run_notebook(server: ConnectServer, cluster: Cluster, topic: str, group: str, work: Path, *trigger: str) -> str:
    env = {**job_env(), "ROCKETMQ_ACCESS_KEY": ACL_USER, "ROCKETMQ_SECRET_KEY": ACL_PASSWORD}
    done = subprocess.run(
        [
            sys.executable,
            str(NOTEBOOK),
            "--remote",
            server.url,
            "--name-server",
            cluster.namesrv_addr,
            "--topic",
            topic,
            "--consumer-group",
            group,
            "--max-per-trigger",
            PER_TRIGGER,
            "--checkpoint",
            str(work / "checkpoint"),
            "--output",
            str(work / "orders"),
            *trigger,
        ],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"the notebook failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_notebook_runs_as_a_scheduled_job_would(
    connect_server: ConnectServer, spark: Any, acl_cluster: Cluster, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique("notebook"), unique("notebook-group")
    acl_cluster.tool("create-topic", "--topic", topic, "--queues", str(QUEUES), *SIGNED)
    sent = acl_cluster.tool("produce", "--topic", topic, "--count", str(FIRST_RUN), "--keys", "n1-{i}", *SIGNED)
    first = run_notebook(connect_server, acl_cluster, topic, group, tmp_path)
    sent += acl_cluster.tool("produce", "--topic", topic, "--count", str(SECOND_RUN), "--keys", "n2-{i}", *SIGNED)
    second = run_notebook(connect_server, acl_cluster, topic, group, tmp_path)
    # The same checkpoint with an interval trigger, as a notebook that keeps the stream running.
    sent += acl_cluster.tool("produce", "--topic", topic, "--count", str(THIRD_RUN), "--keys", "n3-{i}", *SIGNED)
    third = run_notebook(connect_server, acl_cluster, topic, group, tmp_path, "--trigger", TRIGGER, "--until-caught-up")

    for out in (first, second, third):
        assert f"lag: 0 messages behind on {QUEUES} queues" in out, out
    assert f"holds {FIRST_RUN} rows" in first
    assert f"holds {FIRST_RUN + SECOND_RUN} rows" in second
    assert f"holds {FIRST_RUN + SECOND_RUN + THIRD_RUN} rows" in third
    keys = Counter(row.keys for row in spark.read.parquet(str(tmp_path / "orders")).select("keys").collect())
    assert set(keys) == {m["keys"] for m in sent}
    assert max(keys.values()) == 1, "a message reached the table twice"
    offsets = acl_cluster.tool("offsets", "--topic", topic, "--group", group, *SIGNED)
    assert [row["consumerOffset"] for row in offsets] == [row["maxOffset"] for row in offsets]
    assert sum(row["maxOffset"] for row in offsets) == FIRST_RUN + SECOND_RUN + THIRD_RUN
