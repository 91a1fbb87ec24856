"""The built wheel where the PySpark is too old: 3.5, the last line without Python stream sources.

Installing must still leave that PySpark alone (the package does not require PySpark), and
importing the package must fail at once with the one sentence that names the version found,
what is needed and how to get it, not with a traceback from deep inside PySpark.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.lines import Dist, LineVenv, find_pyspark, run

pytestmark = [pytest.mark.spark_lines]

OLD_PYSPARK = "3.5.9"  # the newest of the 3.5 line
IMPORT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def old_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LineVenv]:
    root = tmp_path_factory.mktemp("pyspark-3.5") / "venv"
    run(sys.executable, "-m", "venv", str(root), cwd=root.parent)
    python = str(root / "bin" / "python")
    pip = (python, "-m", "pip", "install", "--disable-pip-version-check")
    run(*pip, "-q", f"pyspark=={OLD_PYSPARK}", cwd=root.parent)
    before = find_pyspark(python, root.parent)
    output = run(*pip, str(dist.wheel), cwd=root.parent)
    yield LineVenv(OLD_PYSPARK, root, before, find_pyspark(python, root.parent), output)
    shutil.rmtree(root, ignore_errors=True)


def test_the_wheel_installs_beside_pyspark_3_5_without_touching_it(old_venv: LineVenv) -> None:
    assert old_venv.before.version == old_venv.after.version == OLD_PYSPARK
    assert old_venv.before.location == old_venv.after.location
    assert old_venv.pip_touched_pyspark() == [], old_venv.wheel_output


def test_importing_the_package_on_pyspark_3_5_fails_with_one_sentence(old_venv: LineVenv, tmp_path: Path) -> None:
    done = old_venv.run("-c", "import rocketmq_spark", cwd=tmp_path, timeout=IMPORT_TIMEOUT_S)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: rocketmq-spark needs PySpark 4.0 or later"), done.stderr
    assert f"found PySpark {OLD_PYSPARK}" in last and 'pip install "rocketmq-spark[spark]"' in last
    # Spark finds sources through pyspark_rocketmq, which imports the package: the same sentence.
    found = old_venv.run("-c", "import pyspark_rocketmq", cwd=tmp_path, timeout=IMPORT_TIMEOUT_S)
    assert found.returncode == 1 and found.stderr.strip().splitlines()[-1] == last
