"""The backfill over a sample of real files nobody here wrote: every file
ends indexed (or linked as an exact duplicate) or dead-lettered with a
specific error class. The full corpus sweep is ``benchmarks/sweep_corpus.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings, open_catalog
from ragsync.errors import ERROR_CLASSES
from ragsync.index.reconcile import reconcile
from tests import corpus

pytestmark = pytest.mark.slow
CORPUS = corpus.CORPUS / "documents"

# Known nasty files and their expected dead-letter classes.
NASTY = {
    "pdfplumber/empty.pdf": "empty",
    "pdfplumber/password-example.pdf": "encrypted",
    "ocrmypdf-resources/invalid.pdf": "corrupt",
    "tika/testWORD_truncated.docx": "corrupt",
    "tika/testODTnotaZipFile.odt": "corrupt",
}
# One small file per format family, picked deterministically below.
SUFFIXES = (
    ".md",
    ".html",
    ".docx",
    ".pdf",
    ".txt",
    ".xlsx",
    ".pptx",
    ".odt",
    ".rtf",
    ".eml",
    ".doc",
    ".epub",
)
MAX_BYTES = 60_000


def _sample() -> list[str]:
    picked = list(NASTY)
    for suffix in SUFFIXES:
        files = sorted(
            p
            for p in CORPUS.rglob(f"*{suffix}")
            if p.is_file() and 200 < p.stat().st_size < MAX_BYTES and "protected" not in p.name
        )
        picked += [str(p.relative_to(CORPUS)) for p in files[:2]]
    return sorted(set(picked))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=corpus.CORPUS_MISSING)
def test_every_sampled_corpus_file_is_indexed_or_dead_lettered(tmp_path: Path) -> None:
    sample = _sample()
    assert len(sample) >= 20
    src = tmp_path / "src"
    for rel in sample:
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / rel, dest)
    settings = Settings(home=str(tmp_path / "home"))
    summary = run_backfill(str(src), settings, show_progress=False)
    assert summary.documents_seen == len(sample)

    cat = open_catalog(settings)
    try:
        outcome: dict[str, str] = {}
        children: dict[str, str] = {}  # attachments of the sampled e-mails: child documents
        for doc in cat.documents.documents_for_source(cat_source_id(cat)):
            if doc.parent_doc_id is not None:
                children[doc.uri] = doc.status
                continue
            rel = str(Path(doc.uri).relative_to(src))
            outcome[rel] = doc.status if doc.status != "dead_letter" else f"dead:{doc.error_class}"
    finally:
        cat.close()
    assert sorted(outcome) == sample, "every listed file has a document row"
    for rel, state in outcome.items():
        assert state in ("indexed", "duplicate") or state.startswith("dead:"), (rel, state)
        if state.startswith("dead:"):
            error_class = state.split(":", 1)[1]
            assert error_class in ERROR_CLASSES and error_class != "internal", (rel, state)
    for rel, error_class in NASTY.items():
        assert outcome[rel] == f"dead:{error_class}", rel
    indexed = [r for r, s in outcome.items() if s == "indexed"]
    assert len(indexed) >= len(sample) // 2
    assert summary.documents_indexed == len(indexed) + sum(s == "indexed" for s in children.values())
    assert all("#" in uri for uri in children)
    assert reconcile(settings, 384).ok


def cat_source_id(cat: object) -> str:
    """The one source a backfill registered."""
    from sqlalchemy import select

    from ragsync.catalog import schema

    with cat.engine.connect() as conn:  # type: ignore[attr-defined]
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())
