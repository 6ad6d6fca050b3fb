"""Layers point one way: connectors/ and ragsync/ never import Apache Beam;
beam_pipelines/ is the only layer that builds pipelines; cli/ (the ``ragsync``
command line) is the top layer, imported by nothing but the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["connectors", "ragsync"])
def test_plain_python_layers_do_not_import_beam(package: str) -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] == "apache_beam")
        for p in (ROOT / package).rglob("*.py")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}


@pytest.mark.parametrize("package", ["connectors", "ragsync", "transforms"])
def test_lower_layers_do_not_import_pipelines(package: str) -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / package).rglob("*.py")
        if any(n.split(".")[0] == "beam_pipelines" for n in _imports(p))
    ]
    assert offenders == []


def test_connectors_do_not_import_transforms() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "connectors").rglob("*.py")
        if any(n.split(".")[0] == "transforms" for n in _imports(p))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "package",
    ["ragsync", "connectors", "transforms", "beam_pipelines", "control_plane", "benchmarks", "templates"],
)
def test_nothing_imports_the_command_line(package: str) -> None:
    """cli/ is the top layer: what it shares with other entry points (the
    Dataflow templates' launchers) lives below it (``ragsync.ops.console``)."""
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] == "cli")
        for p in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert len(list((ROOT / package).rglob("*.py"))) >= 1


def test_layering_check_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import apache_beam as beam\nfrom apache_beam.io import fileio\n")
    assert {"apache_beam", "apache_beam.io"} <= _imports(bad)


# ----------------------------------------------------------------- SQL in one place

PRODUCT = ("ragsync", "connectors", "transforms", "beam_pipelines", "control_plane", "cli")
SQL_FREE = (*PRODUCT, "benchmarks", "templates", "scripts")


def _sql_uses(path: Path) -> list[str]:
    """SQLAlchemy/Alembic imports and reaches into a catalog's engine in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = sorted(n for n in _imports(path) if n.split(".")[0] in ("sqlalchemy", "alembic"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("connect", "begin"):
            owner = node.value
            if isinstance(owner, ast.Attribute) and owner.attr in ("engine", "_engine"):
                found.append(f".{owner.attr}.{node.attr}()")
    return found


def test_sql_appears_only_in_the_catalog_package() -> None:
    """Every layer reads and writes the catalog through ``Catalog`` methods;
    SQLAlchemy (Core, ORM, ``text()``) and Alembic live in ragsync/catalog."""
    catalog = ROOT / "ragsync" / "catalog"
    offenders = {
        str(p.relative_to(ROOT)): uses
        for package in SQL_FREE
        for p in sorted((ROOT / package).rglob("*.py"))
        if catalog not in p.parents and (uses := _sql_uses(p))
    }
    assert offenders == {}
    assert len(list(catalog.rglob("*.py"))) >= 8 and _sql_uses(catalog / "base.py")


def test_sql_check_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from sqlalchemy import text\nimport alembic.command\n\n"
        "def f(catalog):\n"
        "    with catalog.engine.connect() as conn:\n"
        "        conn.execute(text('SELECT 1'))\n"
    )
    assert _sql_uses(bad) == ["alembic.command", "sqlalchemy", ".engine.connect()"]


# ----------------------------------------------------------------- import circles

# None allowed. The last ones were broken by moving shared code to a module
# both sides import (e.g. ragsync.embedding.base for the embedding registry and
# its ONNX backend); a lazy import hides a circle, it does not remove it.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()


def _module_names() -> dict[str, Path]:
    out = {}
    for package in PRODUCT:
        for p in (ROOT / package).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _project_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules ``path`` imports anywhere (module level, functions,
    ``TYPE_CHECKING`` blocks): a lazy import hides a circle, it does not remove it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in modules else node.module)
    return {m for m in out if m in modules}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_in_a_circle() -> None:
    modules = _module_names()
    graph = {m: _project_imports(p, modules) - {m} for m, p in modules.items()}
    assert len(graph) > 80
    assert not KNOWN_CIRCLES, "no import circle may be allowed"
    assert [sorted(c) for c in _circles(graph)] == []


def test_circle_check_detects_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


# ----------------------------------------------------------------- the index changes in one place

STORE_WRITES = ("upsert", "set_acl_ids", "point_alias", "drop_physical", "drop_collection", "create_alias")


def _store_writes(path: Path) -> list[str]:
    """Calls that change a vector or keyword store in one file: a store
    write method, or ``.delete(tenant, ids)`` (two arguments: a store's
    delete; the object store's and SQLAlchemy's take one or none)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in STORE_WRITES or (name == "delete" and len(node.args) + len(node.keywords) == 2):
                found.append(f"{name}:{node.lineno}")
    return found


def test_only_the_index_service_changes_the_stores() -> None:
    """Every upsert, ACL rewrite, delete, alias move and drop of a vector or
    keyword store is in ragsync/index (the index service, its stores and
    its backends); pipelines, the control plane and the command line call the
    service. The catalog keeps its own SQL writes."""
    index, catalog = ROOT / "ragsync" / "index", ROOT / "ragsync" / "catalog"
    offenders = {
        str(p.relative_to(ROOT)): calls
        for package in PRODUCT
        for p in sorted((ROOT / package).rglob("*.py"))
        if index not in p.parents and catalog not in p.parents and (calls := _store_writes(p))
    }
    assert offenders == {}
    assert len(_store_writes(index / "stores.py")) >= 6


def test_store_write_check_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("vec.upsert(chunks, vectors)\nkw.delete(tenant, ids)\nFileSystems.delete([p])\n")
    assert _store_writes(bad) == ["upsert:1", "delete:2"]


# ----------------------------------------------------------------- module size

MAX_MODULE_LINES = 800


def test_no_product_module_is_over_800_lines() -> None:
    """Small modules with names that say what they hold: a module that grows
    past the limit is split by concern (as ``ragsync.decisions`` was)."""
    root = Path(__file__).resolve().parents[1]
    too_long = {
        str(p.relative_to(root)): n
        for package in PRODUCT
        for p in (root / package).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}


def test_every_project_import_outside_the_product_names_something_that_exists() -> None:
    """mypy checks the product's imports; the tests', benchmarks' and
    scripts' are only found when they run. ``from <project module> import
    NAME`` anywhere there (inside functions too) must name a module that
    exists and a NAME it has (or a submodule): a module that moved broke a
    test file only at CI's run of it."""
    import importlib

    missing = []
    for folder in ("tests", "benchmarks", "templates", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                if node.module.split(".")[0] not in PRODUCT:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                try:
                    module = importlib.import_module(node.module)
                except ImportError as exc:
                    missing.append(f"{where}: {node.module} ({exc})")
                    continue
                for alias in node.names:
                    if alias.name == "*" or hasattr(module, alias.name):
                        continue
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{where}: {node.module} has no {alias.name}")
    assert missing == []
