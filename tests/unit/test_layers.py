"""The package's floors: model at the bottom, then remoting, records, config and source; each module
imports only from its own floor or below, and none grows past the size one reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import rocketmq_spark

PACKAGE = "rocketmq_spark"
ROOT = Path(rocketmq_spark.__file__).resolve().parent
# Lowest first. The package's __init__ (its public face) sits on top of them all.
FLOORS = ("model", "remoting", "records", "config", "source")
FACE = len(FLOORS)
MAX_MODULE_LINES = 420


def floor_of(module: str) -> int:
    """The floor of ``rocketmq_spark.<part>...``; the bare package is its face."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        raise ValueError(f"{module} is not in {PACKAGE}")
    return FLOORS.index(parts[1]) if len(parts) > 1 else FACE


def module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module of the package named by an import; ``from a import b`` counts ``a.b`` when
    ``b`` is a submodule (``from rocketmq_spark.remoting import codes``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def upward_imports(root: Path) -> list[str]:
    """``importer -> imported`` for each import that reaches a higher floor."""
    known = {module_name(path, root) for path in root.rglob("*.py")}
    problems = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        for imported in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if imported not in known:
                continue  # ``from package import name`` where name is not a module
            if floor_of(imported) > floor_of(importer):
                problems.append(f"{importer} -> {imported}")
    return problems


def test_no_module_imports_from_a_higher_floor() -> None:
    assert upward_imports(ROOT) == []


def test_every_module_stands_on_a_floor() -> None:
    for path in ROOT.rglob("*.py"):
        floor_of(module_name(path, ROOT))  # raises for a module outside the floors


def test_the_check_sees_imports_and_catches_an_upward_one(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    for folder in ("remoting", "source"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("")
    (package / "source" / "reader.py").write_text(f"from {PACKAGE}.remoting import client\n")
    (package / "remoting" / "client.py").write_text(f"from {PACKAGE}.model import Thing\nimport {PACKAGE}.source.reader\n")
    assert upward_imports(package) == [f"{PACKAGE}.remoting.client -> {PACKAGE}.source.reader"]


def test_modules_stay_small() -> None:
    sizes = {module_name(path, ROOT): len(path.read_text(encoding="utf-8").splitlines()) for path in ROOT.rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
