"""The cluster recipe of docs/operations.md, run as written on a Spark standalone cluster.

A master and two workers of the installed PySpark (integration/standalone.py); the recipe's
blocks pack a fresh virtualenv with the built wheel (venv-pack) and submit, with the archive
shipped by ``--archives``, examples/backfill.py (a time window: exactly the messages stored in
it) and examples/stream_to_parquet.py twice on one checkpoint (every message once in the sink,
and the group's stored offsets at the topic's end). The blocks change only by the substitutions
below: the master, the name server, the topic and group, the paths, the window's times, and the
wheel for the package's name on PyPI.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from integration.constants import REPO, STORED_TIMEOUT_S
from integration.lines import Dist
from integration.snippets import documented, shell, substitute
from integration.standalone import StandaloneCluster, spark_env
from integration.support import ClusterHandle, create_topic, eventually, offsets_and_ends, produce

pytestmark = [pytest.mark.integration, pytest.mark.docs]

QUEUES = 2
OUTSIDE = 3  # messages before and after the backfill's window
INSIDE = 10
LATE = 4  # messages between the stream's two runs
SUBMIT_TIMEOUT_S = 600.0
COLUMNS = ("brokerName", "queueId", "queueOffset", "keys")
DOCUMENTED_MASTER = "spark://master-host:7077"
DOCUMENTED_NAMESRV = "'ns1:9876;ns2:9876'"
DOCUMENTED_EXAMPLES = "docs/examples/"
# What every spark-submit of the test runs with (SPARK_CONF_DIR): no web UI, small executors.
SPARK_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
}


def iso_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parquet_rows(path: Path) -> list[dict[str, object]]:
    """The rows of a parquet directory Spark wrote (its _SUCCESS and _spark_metadata left out)."""
    rows: list[dict[str, object]] = pq.read_table(path, columns=list(COLUMNS)).to_pylist()
    return rows


def test_backfill_and_a_restarted_stream_on_a_standalone_cluster(
    dist: Dist, rocketmq: ClusterHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in SPARK_DEFAULTS.items()))
    env = {
        **spark_env(),
        "SPARK_CONF_DIR": str(conf),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    pack = substitute(documented("cluster-pack"), {"install rocketmq-spark ": f"install {dist.wheel} "})
    shell(pack, submit_dir, env)

    topic, group = unique("recipe"), unique("recipe-group")
    create_topic(rocketmq, topic, queues=QUEUES)
    produce(rocketmq, topic, OUTSIDE, "--keys", "before-{i}", "--quiet")
    start = iso_now()
    produce(rocketmq, topic, INSIDE, "--keys", "inside-{i}", "--quiet")
    end = iso_now()
    produce(rocketmq, topic, OUTSIDE, "--keys", "after-{i}", "--quiet")

    with StandaloneCluster(tmp_path / "spark") as cluster:
        common = {
            DOCUMENTED_MASTER: cluster.master_url,
            DOCUMENTED_NAMESRV: f"'{rocketmq.namesrv_addr}'",
            DOCUMENTED_EXAMPLES: f"{REPO}/{DOCUMENTED_EXAMPLES}",
            "--topic orders": f"--topic {topic}",
        }
        backfill_block = documented("cluster-backfill")
        backfill = tmp_path / "backfill"
        shell(
            substitute(
                backfill_block,
                {
                    **common,
                    "2025-01-01T00:00:00Z": start,
                    "2025-01-02T00:00:00Z": end,
                    "/data/orders/2025-01-01": str(backfill),
                },
            ),
            submit_dir,
            env,
            SUBMIT_TIMEOUT_S,
        )
        assert sorted(row["keys"] for row in parquet_rows(backfill)) == sorted(f"inside-{i}" for i in range(INSIDE))

        # The stream's block follows the backfill's in the same shell: its export line holds.
        exports = backfill_block.splitlines()[0]
        assert exports.startswith("export PYSPARK_PYTHON="), exports
        sink, checkpoint = tmp_path / "stream", tmp_path / "checkpoint"
        stream = (
            exports
            + "\n"
            + substitute(
                documented("cluster-stream"),
                {
                    **common,
                    "orders-to-parquet": group,
                    "/data/orders/stream": str(sink),
                    "/data/checkpoints/orders": str(checkpoint),
                },
            )
        )
        shell(stream, submit_dir, env, SUBMIT_TIMEOUT_S)
        assert len(parquet_rows(sink)) == 2 * OUTSIDE + INSIDE
        produce(rocketmq, topic, LATE, "--keys", "late-{i}", "--quiet")
        shell(stream, submit_dir, env, SUBMIT_TIMEOUT_S)

    rows = parquet_rows(sink)
    positions = {(row["brokerName"], row["queueId"], row["queueOffset"]) for row in rows}
    assert len(rows) == len(positions) == 2 * OUTSIDE + INSIDE + LATE
    assert {row["keys"] for row in rows} == {
        *(f"{part}-{i}" for part in ("before", "after") for i in range(OUTSIDE)),
        *(f"inside-{i}" for i in range(INSIDE)),
        *(f"late-{i}" for i in range(LATE)),
    }

    def at_the_end() -> bool:
        stored, ends = offsets_and_ends(rocketmq, topic, group)
        return stored == ends and sum(ends.values()) == len(rows)

    eventually(at_the_end, "the group's stored offsets did not reach the topic's end", STORED_TIMEOUT_S)
