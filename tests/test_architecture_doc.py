"""docs/architecture.md names real code: every ``path.py::Name`` (or
``path.py::Class.method``) it cites is defined in that file, exactly once,
and every module path it names exists. A walk through the code that names a
step the code no longer has fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
CITED = re.compile(r"([\w/]+\.py)::([\w.]+)")
MODULE = re.compile(r"`((?:connectors|ragsync|transforms|beam_pipelines|control_plane|cli)/[\w/]+\.py)")


def definitions(path: Path) -> list[str]:
    """Qualified names of the functions and classes ``path`` defines (``f``, ``C``, ``C.m``)."""
    out: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(node.name)
        elif isinstance(node, ast.ClassDef):
            out.append(node.name)
            out += [
                f"{node.name}.{m.name}"
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
    return out


def missing(text: str) -> list[str]:
    """Every citation of ``text`` that names no single definition, and every
    module path that does not exist."""
    bad = []
    for path, name in CITED.findall(text):
        file = ROOT / path
        if not file.is_file():
            bad.append(f"{path} (no such file)")
        elif definitions(file).count(name) != 1:
            bad.append(f"{path}::{name}")
    bad += [p for p in MODULE.findall(text) if not (ROOT / p).is_file()]
    return bad


def test_every_step_the_walks_name_exists_once() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(CITED.findall(text)) >= 25
    assert missing(text) == []


def test_the_check_finds_a_step_that_is_gone() -> None:
    text = "`ragsync/index/service.py::IndexService.write_batch` and `transforms/write.py::WriteIndexes`"
    assert missing(text) == ["transforms/write.py (no such file)", "transforms/write.py"]
    assert missing("`ragsync/index/service.py::IndexService.no_such_step`") == [
        "ragsync/index/service.py::IndexService.no_such_step"
    ]
