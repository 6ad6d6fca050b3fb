"""Counters are declared once (``ragsync.counters``): every name a step (or
the writer the steps call, ``ragsync/index/service.py``) counts is declared, every
declared name is counted by some step, and the run summaries report exactly
the declared counters of their run."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from beam_pipelines.quick import BackfillSummary
from beam_pipelines.streaming import StreamSummary
from ragsync.counters import COUNTERS, LISTING, REEMBED, REINDEX, STREAM
from transforms.metrics import counter

ROOT = Path(__file__).resolve().parents[1]
STEPS = [
    *(ROOT / "transforms").glob("*.py"),
    ROOT / "beam_pipelines" / "reembed.py",
    ROOT / "beam_pipelines" / "reindex.py",
    *(ROOT / "ragsync" / "index").glob("*.py"),
]


def _counted_names() -> set[str]:
    """String literals passed to ``counter(...)`` or ``.count(...)`` in the steps,
    those of a literal tuple a loop counts (``for name in (...): self.count(name)``)
    and an index operation's ``counter`` attribute."""
    names: set[str] = set()
    for path in STEPS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = node.args[0]
                if called in ("counter", "count") and isinstance(first, ast.Constant):
                    names.add(str(first.value))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.Constant):
                # An index operation's ``counter`` (``ragsync.index.operations``),
                # which ``transforms.index.UpdateIndex`` counts for it.
                for target in node.targets:
                    pairs = (
                        zip(target.elts, node.value.elts, strict=False)
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                        else [(target, node.value)]
                    )
                    for name, value in pairs:
                        if (
                            isinstance(name, ast.Name)
                            and name.id == "counter"
                            and isinstance(value, ast.Constant)
                        ):
                            names.add(str(value.value))
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
                body = ast.unparse(node)
                if ".count(" in body or "counter(" in body:
                    names.update(str(e.value) for e in node.iter.elts if isinstance(e, ast.Constant))
    return names


def test_every_counted_name_is_declared_and_every_declared_name_is_counted() -> None:
    counted = _counted_names()
    assert len(counted) > 25
    assert sorted(counted - set(COUNTERS)) == []
    assert sorted(set(COUNTERS) - counted) == []


def test_no_step_counts_a_name_it_builds_at_run_time() -> None:
    """A name made at run time (an f-string) escapes the check above."""
    for path in STEPS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.JoinedStr):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert called not in ("counter", "count"), f"{path.name}:{node.lineno}"


def test_an_undeclared_counter_is_refused() -> None:
    with pytest.raises(ValueError, match="'documents_frobbed' is not declared in ragsync.counters"):
        counter("documents_frobbed")


def test_run_summaries_report_the_declared_counters_of_their_run() -> None:
    stream_fields = [f.name for f in dataclasses.fields(StreamSummary) if f.name not in ("seconds", "cost")]
    assert stream_fields == list(STREAM)
    backfill_fields = {f.name for f in dataclasses.fields(BackfillSummary)}
    extras = {"seconds", "cost", "orphans_removed", "pipeline_skipped"}
    assert sorted(backfill_fields - extras - set(COUNTERS)) == []
    assert set(LISTING) <= set(COUNTERS) and set(REEMBED) <= set(COUNTERS) and set(STREAM) <= set(COUNTERS)
    assert set(REINDEX) <= set(COUNTERS)
    assert all(COUNTERS[name].strip() for name in COUNTERS)
