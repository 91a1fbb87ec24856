"""Maven builds behind the launcher: a classpath per RocketMQ release, and the test tool.

``integration/pom.xml`` resolves one release's servers and mqadmin into
``target/classpath-<version>.txt``; ``integration/tool/pom.xml`` builds the tool on the official
Java client into ``target/tool/``. Both are rebuilt only when older than their sources.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from integration.constants import OUTPUT_TAIL_CHARS
from integration.versions import release

INTEGRATION_DIR = Path(__file__).resolve().parent
SERVERS_POM = INTEGRATION_DIR / "pom.xml"
TOOL_POM = INTEGRATION_DIR / "tool" / "pom.xml"
TARGET = INTEGRATION_DIR / "target"
TOOL_TARGET = TARGET / "tool"
TOOL_JAR = TOOL_TARGET / "rocketmq-spark-it-tool.jar"
TOOL_CLASSPATH_FILE = TOOL_TARGET / "classpath.txt"
BUILD_LOCK_NAME = ".build.lock"
ROCKETMQ_GROUP = "org.apache.rocketmq"


class BuildError(RuntimeError):
    """Maven is missing or a build failed."""


def classpath_file(version: str) -> Path:
    return TARGET / f"classpath-{version}.txt"


def _newer_than(outputs: list[Path], sources: list[Path]) -> bool:
    if not all(out.exists() for out in outputs):
        return False
    built = min(out.stat().st_mtime for out in outputs)
    return all(src.stat().st_mtime <= built for src in sources)


def _tool_fresh() -> bool:
    sources = [TOOL_POM, *INTEGRATION_DIR.glob("tool/src/**/*.java")]
    return _newer_than([TOOL_JAR, TOOL_CLASSPATH_FILE], sources)


def _servers_fresh(version: str) -> bool:
    return _newer_than([classpath_file(version)], [SERVERS_POM])


def _maven(pom: Path, *args: str, goal: str | None = "package") -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BuildError("Maven (mvn) is not on PATH; install it to build the RocketMQ test tooling")
    goals = [goal] if goal else []
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), *args, *goals], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(
            f"mvn {' '.join(goals)} ({pom.name} {' '.join(args)}) failed:\n"
            f"{result.stdout[-OUTPUT_TAIL_CHARS:]}\n{result.stderr[-OUTPUT_TAIL_CHARS:]}"
        )


def _locked_build(needed: Callable[[], bool], build: Callable[[], None]) -> None:
    """Run ``build`` if ``needed()``, once across processes.

    Tests run the tool from several processes at once; a lock keeps them from building into the
    same target directory together, and whoever waited finds the build done.
    """
    if not needed():
        return
    TARGET.mkdir(exist_ok=True)
    with open(TARGET / BUILD_LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if needed():
            build()


def _build_tool() -> None:
    _maven(TOOL_POM)
    # Maven leaves up-to-date outputs untouched; mark them as built now, or every later call
    # would find them older than the sources and build again.
    for output in (TOOL_JAR, TOOL_CLASSPATH_FILE):
        output.touch()


def _build_servers(version: str) -> None:
    rel = release(version)
    _maven(SERVERS_POM, *rel.maven_args)
    if rel.base is not None:
        _swap_in_modules(version, rel.base, rel.modules)
    classpath_file(version).touch()


def _swap_in_modules(version: str, base: str, modules: tuple[str, ...]) -> None:
    """The base release's classpath with ``modules`` of ``version`` in place of its own: each jar is
    fetched alone (without its pom's dependencies, which name modules Central lacks)."""
    jars_dir = TARGET / f"jars-{version}"
    for module in modules:
        _maven(
            SERVERS_POM,
            "dependency:copy",
            f"-Dartifact={ROCKETMQ_GROUP}:rocketmq-{module}:{version}",
            f"-DoutputDirectory={jars_dir}",
            "-Dmdep.overWriteReleases=true",
            goal=None,
        )
    newer = {f"rocketmq-{module}-{base}.jar": jars_dir / f"rocketmq-{module}-{version}.jar" for module in modules}
    entries = classpath_file(base).read_text().strip().split(os.pathsep)
    swapped = [str(newer.get(Path(entry).name, entry)) for entry in entries]
    missing = set(newer.values()) - set(map(Path, swapped))
    if missing:
        raise BuildError(f"{base}'s classpath lacks the modules {sorted(m.name for m in missing)} replaces")
    classpath_file(version).write_text(os.pathsep.join(swapped))


def ensure_tool_built(force: bool = False) -> None:
    """The tool jar and its classpath, built unless newer than their sources."""
    _locked_build(lambda: force or not _tool_fresh(), _build_tool)


def ensure_built(version: str, force: bool = False) -> None:
    """The tool and the release's classpath, each built unless newer than its sources."""
    release(version)  # an unknown version fails before any build
    ensure_tool_built(force)
    _locked_build(lambda: force or not _servers_fresh(version), lambda: _build_servers(version))


def server_classpath(version: str) -> str:
    """The release's own jars: name server, broker, tools (mqadmin) and, on 5.x, the proxy."""
    ensure_built(version)
    return classpath_file(version).read_text().strip()


def tool_classpath() -> str:
    """The test tool and its client jars (one client release, whatever release the brokers run)."""
    ensure_tool_built()
    return f"{TOOL_JAR}{os.pathsep}{TOOL_CLASSPATH_FILE.read_text().strip()}"


def jars(classpath: str) -> list[Path]:
    return [Path(entry) for entry in classpath.split(os.pathsep) if entry.endswith(".jar")]
