"""Class-data sharing for the servers the launcher starts: JDK 17's dynamic CDS archives.

A RocketMQ server spends most of the CPU of its start loading and verifying a few thousand
classes, and the suite starts servers some hundreds of times (every fault and failover test
restarts them) while the two CI lanes keep both cores busy. A JVM started with
``-XX:SharedArchiveFile`` maps those classes from an archive instead: a broker, a name server
and a proxy reach readiness on about a third less CPU (measured on 5.3.3 with
integration/cluster.py, CPU ticks of each JVM at readiness, with and without).

One archive per JDK, classpath and main class, under ``integration/target/cds``. The first
server of a kind starts with ``-XX:+RecordDynamicDumpInfo``; once it is ready, ``dump`` has
``jcmd`` write its loaded classes to a temporary file and renames it into place, so a reader
never maps half an archive, and two lanes dumping at once only replace one whole archive with
another. Sharing is an optimisation: without ``jcmd`` nothing is dumped, and a JVM that cannot
map an archive (another JDK build, a changed classpath) starts without it (``-Xshare:auto``,
the default).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

# integration/target/cds. Only the standard library here: spark.py, which sparkjobs.py loads by
# path in a line's virtualenv, imports this module too.
ARCHIVE_DIR = Path(__file__).resolve().parent / "target" / "cds"
DUMP_TIMEOUT_S = 60.0
KEY_HEX_CHARS = 16
# CDS's own warnings (a class it cannot archive, an archive it cannot map) stay off the servers'
# and drivers' consoles, which tests read.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_for(java: str, classpath: str, main: str) -> Path:
    """The archive of one kind of server: its JDK (binary and build time), classpath and main class."""
    binary = os.path.realpath(java)
    identity = "\0".join([binary, str(os.stat(binary).st_mtime_ns), classpath, main])
    key = hashlib.sha256(identity.encode()).hexdigest()[:KEY_HEX_CHARS]
    return ARCHIVE_DIR / f"{main.rsplit('.', 1)[-1]}-{key}.jsa"


def sharing(java: str | None, classpath: str, main: str) -> tuple[list[str], str]:
    """The flags of one server's start and the archive to dump once it is ready ("" for none):
    map the archive an earlier start wrote, or let this start be dumped. Without a ``java`` on
    PATH none: the start itself then says Java is missing."""
    if java is None:
        return [], ""
    archive = archive_for(java, classpath, main)
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", *QUIET], ""
    return ["-XX:+RecordDynamicDumpInfo", *QUIET], str(archive)


def dump(pid: int, archive: Path) -> None:
    """Write the classes a ready server loaded as ``archive``, unless another start already did."""
    jcmd = shutil.which("jcmd")
    if jcmd is None or archive.exists():
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{uuid.uuid4().hex}.partial")
    try:
        subprocess.run(
            [jcmd, str(pid), "VM.cds", "dynamic_dump", str(partial)],
            capture_output=True,
            timeout=DUMP_TIMEOUT_S,
            check=False,
        )
        if partial.exists() and partial.stat().st_size > 0:
            os.replace(partial, archive)
    except subprocess.TimeoutExpired:
        pass
    finally:
        partial.unlink(missing_ok=True)
