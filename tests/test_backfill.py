"""End to end: the backfill pipeline on the FnApiRunner with the real model,
Milvus Lite, tantivy and the catalog (SQLite, and PostgreSQL once).

Each test builds a small folder of generated documents, runs the backfill and
checks exact counts and store contents.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from docx import Document

from beam_pipelines.backfill import run_backfill
from beam_pipelines.quick import BackfillSummary
from ragsync.config import Settings, open_catalog
from ragsync.index.reconcile import reconcile
from ragsync.query.search import hybrid_query
from tests.crash_hooks import crash_env
from tests.proc import cli, run_until_killed
from tests.store_state import chunk_ids_by_store

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DIM = 384

HANDBOOK = [
    (
        "Expenses",
        [
            "Submit every receipt within thirty days of the purchase through the expense tool.",
            "Meals with customers are reimbursed up to sixty euros per person including drinks.",
            "Taxi rides are reimbursed when public transport is not available after nine in the evening.",
        ],
    ),
    (
        "Hotels",
        [
            "Employees may book a hotel for up to 180 EUR per night in most cities.",
            "In London, Paris and New York the nightly hotel limit is 250 EUR.",
            "Loyalty points collected on business stays belong to the employee.",
        ],
    ),
    (
        "Equipment",
        [
            "Every new starter receives a laptop, a headset and a monitor on the first day.",
            "Lost laptops must be reported to the security desk within one hour.",
            "Personal phones may read company mail only with the device management profile installed.",
        ],
    ),
]


def _markdown(sections: list[tuple[str, list[str]]], title: str) -> str:
    out = [f"# {title}", ""]
    for heading, paras in sections:
        out += [f"## {heading}", ""]
        for p in paras:
            out += [p, ""]
    return "\n".join(out)


def _make_corpus(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "handbook.md").write_text(_markdown(HANDBOOK, "Employee handbook"))
    (root / "security.html").write_text(
        "<html><head><title>Security</title></head><body><nav>Home | Intranet | Search</nav><main>"
        "<h1>Security rules</h1><p>Lock your screen whenever you leave your desk.</p>"
        "<h2>Badges</h2><p>Report lost badges to reception before the end of the day.</p>"
        "<ul><li>Use the password manager</li><li>Enable two-factor authentication</li></ul>"
        "</main><footer>Copyright ACME</footer></body></html>"
    )
    (root / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    doc = Document()
    doc.add_heading("Onboarding checklist", level=1)
    doc.add_paragraph("New starters meet their buddy on the first morning.")
    doc.add_heading("Accounts", level=2)
    doc.add_paragraph("The service desk creates the email account two days before the start date.")
    table = doc.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Task", "Owner"), ("Laptop", "IT"), ("Badge", "Facilities")]):
        table.cell(r, 0).text = a
        table.cell(r, 1).text = b
    doc.save(str(root / "onboarding.docx"))
    (root / "empty.txt").write_bytes(b"")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage")


def _run(src: Path, settings: Settings, **kwargs: object) -> BackfillSummary:
    return run_backfill(str(src), settings, show_progress=False, **kwargs)  # type: ignore[arg-type]


def _chunk_ids(settings: Settings) -> dict[str, set[str]]:
    return chunk_ids_by_store(settings)


def _aged_corpus(src: Path) -> Path:
    _make_corpus(src)
    # Written an hour ago: no file lies in the racy window of the first
    # listing, so a re-run skips every unchanged one unread (skip_unread).
    old = os.path.getmtime(src) - 3600
    for path in src.rglob("*"):
        os.utime(path, (old, old))
    return src


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """The corpus of one test, which may change it."""
    return _aged_corpus(tmp_path / "src")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Settings, BackfillSummary]:
    """One backfill of a corpus no test changes: (corpus, its home, the
    summary). The first test checks that run and re-runs it unchanged; the
    crash test compares a killed-then-resumed run of the same corpus with it
    (one backfill for both instead of one each)."""
    root = tmp_path_factory.mktemp("clean")
    src = _aged_corpus(root / "src")
    settings = Settings(home=str(root / "home"))
    return src, settings, _run(src, settings)


def test_backfill_indexes_dead_letters_and_rerun_is_idempotent(
    clean: tuple[Path, Settings, BackfillSummary],
) -> None:
    corpus, settings, first = clean
    assert first.documents_seen == 6
    assert first.documents_indexed == 4
    assert first.dead_lettered == 2
    assert first.chunks_embedded == first.chunks_written > 0
    assert first.chunks_deleted == 0
    stores = _chunk_ids(settings)
    assert stores["catalog"] == stores["vector"] == stores["keyword"]
    assert len(stores["catalog"]) == first.chunks_written
    assert reconcile(settings, DIM).ok

    cat = open_catalog(settings)
    try:
        assert cat.dead_letters.dead_letter_counts() == {"empty": 1, "corrupt": 1}
        assert cat.documents.document_counts_by_status() == {"indexed": 4, "dead_letter": 2}
    finally:
        cat.close()

    second = _run(corpus, settings)
    # Nothing read: the 4 indexed documents and the 2 dead letters (final for
    # this parser version) are skipped from their listing metadata.
    assert second.documents_unchanged == second.documents_unread == 6
    assert second.dead_lettered == 0
    assert (second.chunks_embedded, second.chunks_written, second.chunks_deleted) == (0, 0, 0)
    assert second.documents_indexed == 0
    assert _chunk_ids(settings) == stores
    cat = open_catalog(settings)
    try:  # a replayed failure adds no second dead-letter row
        assert cat.dead_letters.dead_letter_counts() == {"empty": 1, "corrupt": 1}
    finally:
        cat.close()

    hits = hybrid_query(settings, "hotel limit per night in London", groups=["everyone"], k=3)
    assert hits and hits[0].uri.endswith("handbook.md")
    assert hits[0].heading_path == ["Employee handbook", "Hotels"]
    assert "250 EUR" in hits[0].text
    docx_hits = hybrid_query(settings, "who owns the badge task", groups=["everyone"], k=5)
    assert any(h.uri.endswith("onboarding.docx") and "| Badge | Facilities |" in h.text for h in docx_hits)


def test_editing_one_paragraph_reembeds_at_most_two_chunks(corpus: Path, tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    _run(corpus, settings)
    before = _chunk_ids(settings)["catalog"]
    edited = [(h, list(p)) for h, p in HANDBOOK]
    edited[1][1][1] = "In London, Paris and New York the nightly hotel limit is 275 EUR since March."
    (corpus / "handbook.md").write_text(_markdown(edited, "Employee handbook"))
    summary = _run(corpus, settings)
    assert summary.documents_indexed == 1 and summary.documents_unchanged == summary.documents_unread == 5
    assert 1 <= summary.chunks_embedded <= 2
    after = _chunk_ids(settings)
    assert after["catalog"] == after["vector"] == after["keyword"]
    assert len(after["catalog"] - before) == summary.chunks_embedded
    assert len(before - after["catalog"]) == summary.chunks_deleted >= 1
    assert reconcile(settings, DIM).ok
    hits = hybrid_query(settings, "nightly hotel limit London", groups=["everyone"], k=1)
    assert "275 EUR" in hits[0].text


def test_restricted_document_never_reaches_other_groups(corpus: Path, tmp_path: Path) -> None:
    (corpus / "hr").mkdir()
    (corpus / "hr" / "salaries.md").write_text(
        "# Salary bands\n\nThe confidential salary band for senior engineers is 95,000 to 120,000 EUR.\n"
    )
    (corpus / ".ragsync-acl.json").write_text(json.dumps({"rules": [{"glob": "hr/*", "groups": ["hr"]}]}))
    settings = Settings(home=str(tmp_path / "home"))
    _run(corpus, settings, acl_groups=["everyone"])
    question = "confidential salary band for senior engineers"
    for groups in (["everyone"], ["engineering"], []):
        hits = hybrid_query(settings, question, groups=groups, k=20)
        assert all("salaries.md" not in h.uri for h in hits), groups
    hr_hits = hybrid_query(settings, question, groups=["hr"], k=3)
    assert [h.uri.endswith("hr/salaries.md") for h in hr_hits] == [True]

    # Permission change: the HR page becomes visible to managers, hidden from hr.
    (corpus / ".ragsync-acl.json").write_text(
        json.dumps({"rules": [{"glob": "hr/*", "groups": ["managers"]}]})
    )
    summary = _run(corpus, settings, acl_groups=["everyone"])
    assert summary.documents_acl_updated == 1
    assert summary.chunks_embedded == 0 and summary.chunks_written == 0
    assert hybrid_query(settings, question, groups=["hr"], k=20) == []
    assert hybrid_query(settings, question, groups=["managers"], k=1)[0].uri.endswith("hr/salaries.md")
    assert reconcile(settings, DIM).ok


def test_exact_duplicates_are_indexed_once_with_both_permissions(corpus: Path, tmp_path: Path) -> None:
    (corpus / "copy").mkdir()
    shutil.copy(corpus / "notes.txt", corpus / "copy" / "notes-copy.txt")
    (corpus / ".ragsync-acl.json").write_text(
        json.dumps({"rules": [{"glob": "copy/*", "groups": ["finance"]}]})
    )
    settings = Settings(home=str(tmp_path / "home"))
    summary = _run(corpus, settings, acl_groups=["everyone"])
    assert summary.documents_duplicate == 1 and summary.documents_indexed == 4
    stores = _chunk_ids(settings)
    cat = open_catalog(settings)
    try:
        counts = cat.chunks.chunk_counts_by_doc()
        assert cat.documents.document_counts_by_status() == {"indexed": 4, "duplicate": 1, "dead_letter": 2}
    finally:
        cat.close()
    assert len(counts) == 4 and stores["catalog"] == stores["vector"]
    for groups in (["everyone"], ["finance"]):
        hits = hybrid_query(settings, "revenue grew quarterly meeting", groups=groups, k=1)
        assert "Revenue grew" in hits[0].text, groups


def test_backfill_killed_mid_write_then_rerun_matches_a_clean_run(
    clean: tuple[Path, Settings, BackfillSummary], tmp_path: Path
) -> None:
    corpus, clean_settings, _ = clean
    crashed_home = tmp_path / "crashed"
    env = crash_env(RAGSYNC_CRASH_AFTER_INDEX_WRITES="2")
    cmd = cli("backfill", str(corpus), "--home", str(crashed_home), "--quiet")
    log = tmp_path / "crash.log"
    code = run_until_killed(cmd, env, log)
    assert code == -signal.SIGKILL, log.read_text()[-2000:]
    crashed = Settings(home=str(crashed_home))
    partial = _chunk_ids(crashed)
    assert partial["vector"] - partial["catalog"], "the crash should leave index rows without catalog rows"

    env.pop("RAGSYNC_CRASH_AFTER_INDEX_WRITES")
    proc = subprocess.run(cmd + ["--json"], env=env, cwd=ROOT, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    summary = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert summary["documents_indexed"] >= 2
    assert _chunk_ids(crashed) == _chunk_ids(clean_settings)
    assert reconcile(crashed, DIM).ok
    cat = open_catalog(crashed)
    try:
        assert cat.documents.document_counts_by_status() == {"indexed": 4, "dead_letter": 2}
    finally:
        cat.close()


def test_backfill_on_postgres_catalog(corpus: Path, tmp_path: Path, postgres_url: str) -> None:
    import uuid

    from sqlalchemy import create_engine, text

    name = "ragsync_e2e_" + uuid.uuid4().hex[:8]
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    settings = Settings(home=str(tmp_path / "home"), catalog_url=url)
    first = _run(corpus, settings)
    assert (first.documents_indexed, first.dead_lettered) == (4, 2)
    second = _run(corpus, settings)
    assert (second.documents_unchanged, second.chunks_embedded, second.chunks_written) == (6, 0, 0)
    assert second.documents_unread == 6  # the skip decision's query runs on PostgreSQL too
    assert reconcile(settings, DIM).ok


def test_near_duplicate_drafts_show_only_the_newest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    body = [p for _, paras in HANDBOOK for p in paras]
    (src / "policy-draft.md").write_text("# Travel policy\n\n" + "\n\n".join(body))
    settings = Settings(home=str(tmp_path / "home"))
    _run(src, settings)
    # A later, slightly edited draft of the same file, and an unrelated note.
    final = [*body[:-1], body[-1] + " Approved by the board in March."]
    (src / "policy-final.md").write_text("# Travel policy\n\n" + "\n\n".join(final))
    (src / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    _run(src, settings)
    hits = hybrid_query(settings, "hotel limit per night in London", groups=["everyone"], k=10)
    uris = {Path(h.uri).name for h in hits}
    assert "policy-final.md" in uris and "policy-draft.md" not in uris
    cat = open_catalog(settings)
    try:
        ids_ = {Path(d.uri).name: d.doc_id for d in cat.documents.documents_for_source(_source(cat))}
        groups = cat.copies.newest_of_groups(sorted(ids_.values()))
    finally:
        cat.close()
    assert groups[ids_["policy-draft.md"]] == ids_["policy-final.md"]
    assert groups[ids_["notes.txt"]] == ids_["notes.txt"]


def _source(cat: object) -> str:
    from sqlalchemy import select

    from ragsync.catalog import schema

    with cat.engine.connect() as conn:  # type: ignore[attr-defined]
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())


def test_boilerplate_chunks_are_not_indexed_again(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    disclaimer = "## Disclaimer\n\nThis message is confidential and intended only for its addressees."
    for name, topic in (("a", "hotel booking rules"), ("b", "laptop replacement")):
        (src / f"{name}.md").write_text(
            f"## {topic}\n\nDetails about {topic} for every team.\n\n{disclaimer}\n"
        )
    settings = Settings(home=str(tmp_path / "home"), boilerplate_min_docs=2)
    _run(src, settings)
    (src / "c.md").write_text(f"## parking\n\nDetails about parking for every team.\n\n{disclaimer}\n")
    summary = _run(src, settings)
    assert (summary.documents_indexed, summary.chunks_written) == (1, 1)
    cat = open_catalog(settings)
    try:
        texts = {
            Path(d.uri).name: [c.text for c in cat.chunks.chunks_for_doc(d.doc_id)]
            for d in cat.documents.documents_for_source(_source(cat))
        }
    finally:
        cat.close()
    assert len(texts["a.md"]) == len(texts["b.md"]) == 2
    assert texts["c.md"] == ["Details about parking for every team."]
