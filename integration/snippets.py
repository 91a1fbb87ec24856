"""The fenced blocks of README.md and docs/, and what the docs test makes of them.

Every fenced block carries a marker on the line right before its opening fence:

- ``<!-- tested: <label> -->``: a test runs it; it finds the block by its label, so the test runs
  the text as the page shows it, and a label no test takes fails the check.
- ``<!-- illustrative: <reason> -->``: not run, and the reason says why (it needs a Databricks
  workspace, it is output, ...).

A block without one fails ``test_every_block_is_tested_or_illustrative``. A test adapts a block
only through ``substitute``: each documented value it replaces (the name server, the Spark
master, the paths) must be in the block, or the test fails rather than run something else.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from integration.constants import REPO

MARKER = re.compile(r"^\s*<!--\s*(tested|illustrative):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*```")
COMMAND_TIMEOUT_S = 600.0
TESTED = "tested"
ILLUSTRATIVE = "illustrative"


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its marker (kind and label or reason) and its text."""

    path: Path
    line: int
    kind: str | None
    note: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def documented_files(repo: Path = REPO) -> list[Path]:
    """README.md and every page under docs/."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, each with the marker of the line before it (if any)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    at = 0
    while at < len(lines):
        if not FENCE.match(lines[at]):
            at += 1
            continue
        marker = MARKER.match(lines[at - 1]) if at > 0 else None
        end = at + 1
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{at + 1}: a fence that is never closed")
        found.append(
            Block(
                path,
                at + 1,
                marker.group(1) if marker else None,
                marker.group(2) if marker else "",
                "\n".join(lines[at + 1 : end]) + "\n",
            )
        )
        at = end + 1
    return found


def all_blocks(repo: Path = REPO) -> list[Block]:
    return [block for path in documented_files(repo) for block in blocks(path)]


def documented(label: str, repo: Path = REPO) -> str:
    """The text of the one block marked ``tested: <label>``."""
    matches = [b for b in all_blocks(repo) if b.kind == TESTED and b.note == label]
    if len(matches) != 1:
        raise AssertionError(f"{len(matches)} blocks are marked 'tested: {label}', not one")
    return matches[0].text


def substitute(text: str, replacements: Mapping[str, str]) -> str:
    """The block with each documented value replaced by the test's; every one must be there."""
    for documented, actual in replacements.items():
        if documented not in text:
            raise AssertionError(f"the block no longer contains {documented!r}:\n{text}")
        text = text.replace(documented, actual)
    return text


def shell(block: str, cwd: Path, env: dict[str, str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a block of commands as bash runs a pasted block, stopping at the first that fails.

    Prints how long the block took (pytest shows it with a failure, or with -rP), to see where a
    docs test spends its minutes."""
    began = time.monotonic()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(f"[{time.monotonic() - began:6.1f} s] {block.strip().splitlines()[0] if block.strip() else ''}")
    assert done.returncode == 0, f"{block}\nfailed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout
