"""The built distributions as a user gets them, on the other supported PySpark.

``python -m build`` makes the sdist and, from it, the wheel; ``twine check`` reads them as PyPI
would. The wheel then goes (not editable) into a fresh virtualenv with the newest PySpark of the
4.2 line, while the rest of the suite runs on the development virtualenv's (4.3): there the unit
tests run against the installed package, and against the real broker a stream goes through
Spark Connect (found without registering, offsets committed) and a batch read runs in classic
PySpark. Every Spark process there runs that virtualenv's interpreter in isolated mode, so only
the installed package can answer ``format("rocketmq")``; a file missing from the wheel, a
dependency missing from its metadata, or a PySpark it does not work with fails here.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import rocketmq_spark
from integration.connect import CONNECT_PORT, ConnectServer, job_env, job_result, source_options
from integration.support import ClusterHandle, create_topic, max_offsets, produce, spark_offsets, stored_offsets

pytestmark = [pytest.mark.integration, pytest.mark.package]

REPO = Path(__file__).resolve().parents[2]
# The PySpark line the development virtualenv does not have; ROCKETMQ_SPARK_OTHER_PYSPARK moves it.
OTHER_PYSPARK = os.environ.get("ROCKETMQ_SPARK_OTHER_PYSPARK", "pyspark~=4.2.0")
OTHER_PYSPARK_LINE = "4.2."
WHEEL_CONNECT_PORT = CONNECT_PORT + 1
INSTALL_TIMEOUT_S = 1200
UNIT_TIMEOUT_S = 600
MESSAGES = 400
PER_TRIGGER = "150"
CONNECT_CLIENT = "pyspark.sql.connect.session"


@dataclass
class Dist:
    wheel: Path
    sdist: Path
    twine: str


@dataclass
class Venv:
    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def run(self, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.python, "-I", *args], capture_output=True, text=True, cwd=cwd,
                              env=job_env(), timeout=timeout, check=False)


def run(*cmd: str, cwd: Path, timeout: float = INSTALL_TIMEOUT_S) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=job_env(), timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", str(out), str(REPO), cwd=out)
    wheel, sdist = next(out.glob("*.whl")), next(out.glob("*.tar.gz"))
    twine = run(sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist), cwd=out)
    return Dist(wheel, sdist, twine)


@pytest.fixture(scope="module")
def venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    root = tmp_path_factory.mktemp("wheel-venv") / "venv"
    run(sys.executable, "-m", "venv", str(root), cwd=root.parent)
    env = Venv(root)
    run(env.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{dist.wheel}[connect,test]",
        OTHER_PYSPARK, cwd=root.parent)
    yield env
    shutil.rmtree(root, ignore_errors=True)


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
    requires = meta.get_all("Requires-Dist")
    assert "pyspark[sql]<5,>=4.2" in requires
    assert 'pyspark[connect]<5,>=4.2; extra == "connect"' in requires
    assert not [r for r in requires if r.startswith(("grpcio", "protobuf", "pandas"))], "PySpark's to declare"
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Documentation", "Source"}
    assert "Framework :: Apache Spark" in meta.get_all("Classifier")
    with tarfile.open(dist.sdist) as sdist:
        top = f"rocketmq_spark-{rocketmq_spark.__version__}"
        members = {m.name.removeprefix(f"{top}/") for m in sdist.getmembers()}
    assert {"setup.cfg", "pyproject.toml", "README.md", "pyspark_rocketmq.py", *package} <= members


def test_unit_tests_pass_against_the_installed_wheel(venv: Venv, tmp_path: Path) -> None:
    # A copy, so that the checkout's own package is not on the path next to the tests.
    shutil.copytree(REPO / "tests", tmp_path / "tests")
    found = venv.run("-c", "import pyspark, rocketmq_spark; print(pyspark.__version__, rocketmq_spark.__file__)",
                     cwd=tmp_path, timeout=UNIT_TIMEOUT_S)
    version, location = found.stdout.split()
    assert version.startswith(OTHER_PYSPARK_LINE) and location.startswith(str(venv.root)), found
    done = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=tmp_path, timeout=UNIT_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_stream_through_connect_then_classic_batch_read(venv: Venv, spark: Any, rocketmq: ClusterHandle,
                                                        unique: Callable[[str], str], tmp_path: Path) -> None:
    topic, group = unique("wheel"), unique("wheel-group")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(rocketmq, topic, MESSAGES, "--keys", "w-{i}", "--batch", "50")
    sink = tmp_path / "sink"
    with ConnectServer(tmp_path / "server", WHEEL_CONNECT_PORT, venv.python) as server:
        streamed = job_result("stream", [
            "--remote", server.url, "--sink", str(sink), "--checkpoint", str(tmp_path / "checkpoint"),
            *source_options(nameServer=rocketmq.namesrv_addr, topic=topic, consumerGroup=group,
                            consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", maxMessagesPerTrigger=PER_TRIGGER),
        ], tmp_path / "client", venv.python)
    batch = job_result("batch", ["--classic", *source_options(nameServer=rocketmq.namesrv_addr, topic=topic)],
                       tmp_path / "classic", venv.python)

    for result in (streamed, batch):
        assert result["spark"].startswith(OTHER_PYSPARK_LINE)
        assert result["package"].startswith(str(venv.root))
    assert streamed["client"] == CONNECT_CLIENT and batch["client"] != CONNECT_CLIENT
    keys = Counter(row.keys for row in spark.read.parquet(str(sink)).select("keys").collect())
    assert set(keys) == {m["keys"] for m in sent} and max(keys.values()) == 1
    ends = max_offsets(rocketmq, topic)
    assert spark_offsets(streamed["endOffset"], topic) == ends
    assert stored_offsets(rocketmq, topic, group) == ends
    assert sorted(batch["keys"]) == sorted(m["keys"] for m in sent)
