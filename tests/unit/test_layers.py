"""The package's floors: model at the bottom, then remoting, records, config, then the source with,
beside it, the sink, and on top the data source where reading and writing meet. Each module imports only from its own room or from the floors
below (never from a room beside its own), and none grows past the size one reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import rocketmq_spark

PACKAGE = "rocketmq_spark"
ROOT = Path(rocketmq_spark.__file__).resolve().parent
# Lowest first, each floor a tuple of its rooms: rooms of one floor stand side by side and share
# what is below. The package's __init__ (its public face) sits on top of them all.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("remoting",),
    ("records",),
    ("config",),
    ("source", "sink"),
    ("datasource",),
)
FACE = len(FLOORS)
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 60
# Long on purpose: the per-record loop of the pull decoder, where a call per message costs more
# than the length (its docstring says why).
LONG_ON_PURPOSE = frozenset({"rocketmq_spark.records.walk.walk"})


def place_of(module: str) -> tuple[int, str]:
    """The floor and room of ``rocketmq_spark.<room>...``; the bare package is its face."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        raise ValueError(f"{module} is not in {PACKAGE}")
    if len(parts) == 1:
        return FACE, PACKAGE
    for floor, rooms in enumerate(FLOORS):
        if parts[1] in rooms:
            return floor, parts[1]
    raise ValueError(f"{module} is on no floor")


def refused(importer: str, imported: str) -> bool:
    """Whether ``importer`` may not import ``imported``: it is on a higher floor, or in another room
    of the same one."""
    (own_floor, own_room), (floor, room) = place_of(importer), place_of(imported)
    return floor > own_floor or (floor == own_floor and room != own_room)


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


def refused_imports(root: Path) -> list[str]:
    """``importer -> imported`` for each import that reaches a higher floor or a room beside its own."""
    known = {module_name(path, root) for path in root.rglob("*.py")}
    problems = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        for imported in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if imported not in known:
                continue  # ``from package import name`` where name is not a module
            if refused(importer, imported):
                problems.append(f"{importer} -> {imported}")
    return problems


def test_no_module_imports_from_a_higher_floor_or_a_room_beside_its_own() -> None:
    assert refused_imports(ROOT) == []


def test_every_module_stands_on_a_floor() -> None:
    for path in ROOT.rglob("*.py"):
        place_of(module_name(path, ROOT))  # raises for a module outside the floors


def test_the_check_sees_imports_and_catches_an_upward_one(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    for folder in ("remoting", "source"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("")
    (package / "source" / "reader.py").write_text(f"from {PACKAGE}.remoting import client\n")
    (package / "remoting" / "client.py").write_text(
        f"from {PACKAGE}.model import Thing\nimport {PACKAGE}.source.reader\n"
    )
    assert refused_imports(package) == [f"{PACKAGE}.remoting.client -> {PACKAGE}.source.reader"]


def test_rooms_of_one_floor_may_not_import_from_each_other(tmp_path: Path) -> None:
    """The sink and the source share config and what is below it, but neither reaches into the other."""
    package = tmp_path / PACKAGE
    for folder in ("config", "source", "sink"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "config" / "cluster.py").write_text("")
    (package / "source" / "options.py").write_text(f"from {PACKAGE}.config import cluster\n")
    (package / "source" / "reader.py").write_text(
        f"from {PACKAGE}.source.options import Options\nfrom {PACKAGE}.sink import writer\n"
    )
    (package / "sink" / "writer.py").write_text(
        f"from {PACKAGE}.config.cluster import NAME_SERVER\nimport {PACKAGE}.source.options\n"
    )
    assert refused_imports(package) == [
        f"{PACKAGE}.sink.writer -> {PACKAGE}.source.options",
        f"{PACKAGE}.source.reader -> {PACKAGE}.sink",
        f"{PACKAGE}.source.reader -> {PACKAGE}.sink.writer",
    ]


def long_functions(root: Path) -> dict[str, int]:
    """``module.function`` (methods as ``module.Class.method``) of every function longer than
    ``MAX_FUNCTION_LINES``, with its length."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    owner = f"{parent.name}." if isinstance(parent, ast.ClassDef) else ""
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found[f"{module}.{owner}{node.name}"] = length
    return found


def test_functions_stay_short() -> None:
    long = long_functions(ROOT)
    assert {name: lines for name, lines in long.items() if name not in LONG_ON_PURPOSE} == {}
    assert LONG_ON_PURPOSE <= set(long), "a function excused for its length is short now: drop the excuse"


def test_the_length_check_sees_methods(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "model.py").write_text(f"class Thing:\n    def long(self) -> None:\n{body}\n")
    assert long_functions(package) == {f"{PACKAGE}.model.Thing.long": MAX_FUNCTION_LINES + 1}


def test_modules_stay_small() -> None:
    sizes = {module_name(path, ROOT): len(path.read_text(encoding="utf-8").splitlines()) for path in ROOT.rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
