"""Layers point one way: connectors/ and ragsync/ never import Apache Beam;
beam_pipelines/ is the only layer that builds pipelines."""

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


def test_layering_check_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import apache_beam as beam\nfrom apache_beam.io import fileio\n")
    assert {"apache_beam", "apache_beam.io"} <= _imports(bad)
