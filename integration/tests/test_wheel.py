"""The built distributions as a user gets them.

``python -m build`` makes the sdist and, from it, the wheel; ``twine check`` reads them as PyPI
would (the ``dist`` fixture). The wheel with its ``connect`` extra then serves a Spark Connect
client in the fresh virtualenv of the newest PySpark 4.2 (integration/lines.py, shared with
test_spark_lines.py, which runs the unit tests and the classic scenarios on every line): a
stream through a Connect server of that virtualenv finds the source without registering it and
commits its offsets. Every Spark process there runs that virtualenv's interpreter in isolated
mode, so only the installed package can answer ``format("rocketmq")``.
"""

from __future__ import annotations

import email
import re
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import rocketmq_spark
from integration.connect import CONNECT_CLIENT, CONNECT_PORT, ConnectServer, job_result, source_options
from integration.constants import FIRST, REPO
from integration.lines import LINES, Dist, LineVenvs, find_pyspark, run
from integration.support import ClusterHandle, create_topic, max_offsets, produce, spark_offsets, stored_offsets

pytestmark = [pytest.mark.integration, pytest.mark.package]

CONNECT_LINE = LINES[-1]
WHEEL_CONNECT_PORT = CONNECT_PORT + 1
MESSAGES = 400
PER_TRIGGER = "150"


def test_the_distributions_carry_what_pypi_and_pip_need(dist: Dist) -> None:
    assert dist.twine.count("PASSED") == 2, dist.twine
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(wheel.read(info))
    package = {f"rocketmq_spark/{p.name}" for p in (REPO / "rocketmq_spark").glob("*.py")}
    assert {"pyspark_rocketmq.py", *package} <= names
    assert not {n for n in names if n.startswith(("tests/", "integration/", "bench/", "docs/"))}
    assert meta["Name"] == "rocketmq-spark" and meta["Version"] == rocketmq_spark.__version__
    assert meta["License"] == "Apache-2.0" and meta["Requires-Python"] == ">=3.10"
    assert "LICENSE" in meta.get_all("License-File", []) and any(
        n.endswith(".dist-info/licenses/LICENSE") for n in names
    )
    requires: list[str] = meta.get_all("Requires-Dist", [])
    # An installed PySpark (a platform's, often where pip cannot see it) is never replaced: the
    # base requirements are what the source imports besides Spark, and PyPI's PySpark is an extra.
    base = {re.split(r"[<>=!~\[; ]", r)[0] for r in requires if "extra ==" not in r}
    assert base == {"pyarrow", "lz4", "zstandard"}
    assert 'pyspark[sql]<5,>=4.0; extra == "spark"' in requires
    assert 'pyspark[connect]<5,>=4.0; extra == "connect"' in requires
    assert not [r for r in requires if r.startswith(("grpcio", "protobuf", "pandas"))], "PySpark's to declare"
    assert "Framework :: Apache Spark" in meta.get_all("Classifier", [])
    with tarfile.open(dist.sdist) as sdist:
        top = f"rocketmq_spark-{rocketmq_spark.__version__}"
        members = {m.name.removeprefix(f"{top}/") for m in sdist.getmembers()}
    assert {"setup.cfg", "pyproject.toml", "README.md", "LICENSE", "pyspark_rocketmq.py", *package} <= members


def test_stream_through_connect(
    line_venvs: LineVenvs, dist: Dist, rocketmq: ClusterHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    venv = line_venvs.get(CONNECT_LINE)
    run(
        venv.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{dist.wheel}[connect]", cwd=tmp_path
    )
    assert find_pyspark(venv.python, tmp_path) == venv.before, "the connect extra replaced PySpark"
    topic, group = unique("wheel"), unique("wheel-group")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(rocketmq, topic, MESSAGES, "--keys", "w-{i}", "--batch", "50")
    sink = tmp_path / "sink"
    with ConnectServer(tmp_path / "server", WHEEL_CONNECT_PORT, venv.python) as server:
        streamed = job_result(
            "stream",
            [
                "--remote",
                server.url,
                "--sink",
                str(sink),
                "--checkpoint",
                str(tmp_path / "checkpoint"),
                "--read-back",
                *source_options(
                    nameServer=rocketmq.namesrv_addr,
                    topic=topic,
                    consumerGroup=group,
                    consumeFromWhere=FIRST,
                    maxMessagesPerTrigger=PER_TRIGGER,
                ),
            ],
            tmp_path / "client",
            venv.python,
        )

    assert streamed["spark"] == CONNECT_LINE and streamed["client"] == CONNECT_CLIENT
    assert streamed["package"].startswith(str(venv.root))
    keys = Counter(streamed["keys"])
    assert set(keys) == {m["keys"] for m in sent} and max(keys.values()) == 1
    ends = max_offsets(rocketmq, topic)
    assert spark_offsets(streamed["endOffset"], topic) == ends
    assert stored_offsets(rocketmq, topic, group) == ends
