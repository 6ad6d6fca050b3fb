"""Office, OpenDocument/legacy (Tika), e-mail and JSON ticket parsing: golden
outputs for owned fixtures, exact assertions, detection, and a deterministic
sample of the shared real-world corpus."""

from __future__ import annotations

import io
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from ragsync.errors import CorruptDocumentError, EncryptedDocumentError
from ragsync.ingest.detect import detect_mime
from ragsync.model import ElementType
from ragsync.parsing import ParseResult, parse
from ragsync.parsing.office import parse_xlsx
from tests.corpus import corpus_dir
from tests.fixtures_gen import write_fixtures
from tests.parse_sample import assert_golden, parse_file, parse_outcomes, quota_sample

GOLDEN = Path(__file__).resolve().parent / "golden" / "formats"
CORPUS = corpus_dir()
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
NAMES = [
    "budget.xlsx",
    "review.pptx",
    "policy_update.eml",
    "maintenance.eml",
    "github_issue.json",
    "jira_issue.json",
]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_fixtures(tmp_path_factory.mktemp("formats"))


def _els(result: ParseResult) -> list[tuple[str, int, int, str]]:
    return [(e.type.value, e.level, e.page, e.text) for e in result.elements]


@pytest.mark.parametrize("name", NAMES)
def test_golden(fixtures: dict[str, Path], name: str) -> None:
    result = assert_golden(fixtures[name], GOLDEN / f"{name}.json")
    assert [e.order for e in result.elements] == list(range(len(result.elements)))


def test_xlsx_sheets(fixtures: dict[str, Path]) -> None:
    result = parse_file(fixtures["budget.xlsx"])
    assert result.pages == 3
    assert _els(result) == [
        ("heading", 1, 1, "Budget"),
        (
            "table",
            0,
            1,
            "| Team | Q1 | Q2 |\n| --- | --- | --- |\n| Sales | 1200 | 1350.5 |\n| Support | 800 |  |",
        ),
        ("heading", 1, 2, "People"),
        ("table", 0, 2, "| Name | Role |\n| --- | --- |\n| Ann | Lead \\| Ops |"),
    ]
    assert "truncated_sheets" not in result.metadata


def test_xlsx_row_cap(fixtures: dict[str, Path]) -> None:
    raw = parse_xlsx(fixtures["budget.xlsx"].read_bytes(), max_rows=2)
    assert raw.metadata == {"sheets": "3", "truncated_sheets": "Budget", "max_rows": "2"}
    assert raw.elements[1].text == "| Team | Q1 | Q2 |\n| --- | --- | --- |\n| Sales | 1200 | 1350.5 |"


def test_pptx_slides_notes_table(fixtures: dict[str, Path]) -> None:
    result = parse_file(fixtures["review.pptx"])
    assert result.pages == 3
    assert _els(result) == [
        ("heading", 1, 1, "Quarterly review"),
        ("list_item", 1, 1, "Revenue grew"),
        ("list_item", 2, 1, "Mostly in EMEA"),
        ("paragraph", 0, 1, "Mention the EMEA hires."),
        ("heading", 1, 2, "Numbers"),
        ("table", 0, 2, "| Region | Revenue |\n| --- | --- |\n| EMEA | 40 |\n| APAC | 25 |"),
        ("paragraph", 0, 3, "Questions welcome"),
        ("paragraph", 0, 3, "Close with the roadmap."),
    ]


def test_eml_headers_body_attachments(fixtures: dict[str, Path]) -> None:
    result = parse_file(fixtures["policy_update.eml"])
    meta = result.metadata
    assert meta["from"] == "Ann Example <ann@example.com>"
    assert meta["to"] == "team@example.com"
    assert meta["cc"] == "boss@example.com"
    assert meta["subject"] == "Travel policy update"
    assert meta["attachments"] == "3"
    els = _els(result)
    assert els[0] == ("heading", 1, 0, "Travel policy update")
    assert els[1][3] == (
        "From: Ann Example <ann@example.com>\nTo: team@example.com\nCc: boss@example.com\n"
        "Date: Tue, 05 Mar 2024 10:00:00 +0000\nSubject: Travel policy update"
    )
    assert els[2] == ("paragraph", 0, 0, "Hi team,")  # text/plain preferred over HTML
    # Attachments are named in the text and returned unparsed, to become child documents.
    assert els[-1] == ("paragraph", 0, 0, "Attachments: policy.docx, note.txt, logo.png")
    assert not any(e[3] == "Travel policy" for e in els)  # the DOCX's text is not inlined
    got = {a.name: a for a in result.attachments}
    assert sorted(got) == ["logo.png", "note.txt", "policy.docx"]
    assert got["note.txt"].data == b"Remember to book early.\n"
    assert got["note.txt"].media_type == "text/plain" and got["note.txt"].depth == 1
    assert got["policy.docx"].data.startswith(b"PK\x03\x04")
    child = parse(got["policy.docx"].data, detect_mime(got["policy.docx"].data, "policy.docx"), depth=1)
    assert child.elements[0].text == "Travel policy"


def test_eml_html_body(fixtures: dict[str, Path]) -> None:
    els = _els(parse_file(fixtures["maintenance.eml"]))
    assert els[2:] == [
        ("paragraph", 0, 0, "Systems are down on Saturday ."),
        ("list_item", 1, 0, "VPN"),
        ("list_item", 1, 0, "Mail"),
    ]


def _nested(depth: int) -> bytes:
    msg = EmailMessage()
    msg["From"] = "a@example.com"
    msg["To"] = "b@example.com"
    msg["Subject"] = f"Level {depth}"
    msg.set_content(f"Body {depth}\n")
    if depth < 5:
        inner = EmailMessage()
        inner.set_content(_nested(depth + 1), maintype="application", subtype="octet-stream")
        msg.add_attachment(
            _nested(depth + 1), maintype="application", subtype="octet-stream", filename="fwd.eml"
        )
    return bytes(msg)


def test_eml_forwarded_chain_stops_at_the_depth_limit() -> None:
    from ragsync.parsing.archive import ArchiveLimits

    limits = ArchiveLimits(max_depth=3)
    data, depth, subjects = _nested(1), 0, []
    while True:
        result = parse(data, detect_mime(data, "m.eml"), limits=limits, depth=depth)
        subjects.append(result.metadata["subject"])
        if not result.attachments:
            break
        (fwd,) = result.attachments
        assert fwd.name == "fwd.eml" and fwd.depth == depth + 1
        data, depth = fwd.data, fwd.depth
    assert subjects == ["Level 1", "Level 2", "Level 3", "Level 4"]
    assert result.metadata["attachments_skipped"] == "nested deeper than 3 containers: fwd.eml"


def test_eml_broken_attachment_is_a_child_that_fails_alone() -> None:
    msg = EmailMessage()
    msg["From"] = "a@example.com"
    msg["To"] = "b@example.com"
    msg["Subject"] = "Broken"
    msg.set_content("See attached.\n")
    msg.add_attachment(
        b"PK\x03\x04 not a zip", maintype="application", subtype="octet-stream", filename="x.docx"
    )
    result = parse(bytes(msg), "message/rfc822")
    assert [e.text for e in result.elements][-2:] == ["See attached.", "Attachments: x.docx"]
    (bad,) = result.attachments
    with pytest.raises(CorruptDocumentError):
        parse(bad.data, detect_mime(bad.data, bad.name), filename=bad.name, depth=bad.depth)


def test_github_and_jira(fixtures: dict[str, Path]) -> None:
    gh = parse_file(fixtures["github_issue.json"])
    assert gh.metadata == {"records": "1", "kind": "github", "title": "#42 Login fails with SSO"}
    texts = [e.text for e in gh.elements]
    assert texts[0] == "#42 Login fails with SSO"
    assert texts[-3:] == [
        "bob (2024-03-02T08:00:00Z): Reproduced on staging.",
        "ann (2024-03-03T08:00:00Z): Fixed by #43.",
        "Thanks!",
    ]
    jira = parse_file(fixtures["jira_issue.json"])
    assert _els(jira)[0] == ("heading", 1, 0, "OPS-7: Backups run twice")
    assert [e.text for e in jira.elements][2:] == [
        "The cron job fires twice.",
        "See the attached log.",
        "Comments",
        "Dan Dev (2024-01-11T09:00:00.000+0000): Duplicate entry in crontab.",
        "Changelog",
        "Dan Dev (2024-01-12T09:00:00.000+0000) changed status: Open -> Resolved",
    ]


def test_jsonl_and_generic_json() -> None:
    lines = b'{"title": "A", "body": "one", "number": 1}\n{"title": "B", "body": "two", "number": 2}\n'
    assert detect_mime(lines) == "application/x-ndjson"
    result = parse(lines, "application/x-ndjson")
    assert [(e.type.value, e.text) for e in result.elements] == [
        ("heading", "#1 A"),
        ("paragraph", "Type: issue"),
        ("paragraph", "one"),
        ("heading", "#2 B"),
        ("paragraph", "Type: issue"),
        ("paragraph", "two"),
    ]
    assert result.metadata == {"records": "2", "kind": "github"}
    flat = parse(b'{"a": {"b": 1, "c": [true, "x"]}, "d": null}', "application/json")
    assert [e.text for e in flat.elements] == ["a.b: 1", "a.c.0: true", "a.c.1: x"]
    with pytest.raises(CorruptDocumentError):
        parse(b"{not json\n{nor this", "application/json")


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return buf.getvalue()


def test_detection(fixtures: dict[str, Path]) -> None:
    assert detect_mime(fixtures["budget.xlsx"].read_bytes(), "x.bin") == XLSX
    assert detect_mime(fixtures["review.pptx"].read_bytes(), "x.bin") == PPTX
    assert detect_mime(fixtures["policy_update.eml"].read_bytes(), "x.txt") == "message/rfc822"
    assert detect_mime(fixtures["jira_issue.json"].read_bytes()) == "application/json"
    odt = _zip({"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": b"<x/>"})
    assert detect_mime(odt, "a.zip") == "application/vnd.oasis.opendocument.text"
    assert detect_mime(odt[:90], "a.zip") == "application/vnd.oasis.opendocument.text"  # truncated
    epub = _zip({"mimetype": b"application/epub+zip", "META-INF/container.xml": b"<x/>"})
    assert detect_mime(epub) == "application/epub+zip"
    xlsb = _zip({"[Content_Types].xml": b"<Types/>", "xl/workbook.bin": b"\x00"})
    assert detect_mime(xlsb) == "application/vnd.ms-excel.sheet.binary.macroenabled.12"
    assert detect_mime(b"{\\rtf1\\ansi Hello}", "a.txt") == "text/rtf"
    mail = "From: a@example.com\nTo: b@example.com\nSubject: Hi\n\nBody\n"
    assert detect_mime(mail.encode("utf-16-le")) == "message/rfc822"
    assert detect_mime(b"Subject: notes\n\nJust text.\n") == "text/plain"
    assert detect_mime(b"This is not a zip file!\n", "a.odt") == "application/vnd.oasis.opendocument.text"
    assert detect_mime(b"This is not a zip file!\n", "a.txt") == "text/plain"


# --------------------------------------------------------------------------- real corpus

corpus_required = pytest.mark.skipif(
    not (CORPUS / "documents").is_dir(), reason="shared corpus not present at ../shared/corpus"
)
_FOLDERS = (
    "tika",
    "python-pptx",
    "unstructured",
    "tickets-github-issues-hf-datasets",
    "tickets-jira-apache-lucene",
)
_QUOTA = {
    ".xlsx": 4,
    ".pptx": 5,
    ".xls": 3,
    ".doc": 4,
    ".ppt": 3,
    ".odt": 3,
    ".ods": 2,
    ".odp": 2,
    ".rtf": 3,
    ".epub": 2,
    ".msg": 3,
    ".eml": 4,
    ".json": 2,
    ".jsonl": 1,
}


def _corpus_sample() -> list[Path]:
    docs = CORPUS / "documents"
    files = [p for folder in _FOLDERS for p in (docs / folder).rglob("*") if p.is_file()]
    files = [p for p in files if p.suffix.lower() in _QUOTA and p.stat().st_size <= 1_500_000]
    picked = quota_sample(((p.relative_to(docs).as_posix(), p.suffix.lower()) for p in files), _QUOTA)
    return sorted(docs / rel for rel in picked)


@corpus_required
def test_corpus_sample_parses_or_fails_specifically() -> None:
    sample = _corpus_sample()
    assert len(sample) >= 38
    outcomes = parse_outcomes((path.name, path) for path in sample)
    assert sum(1 for v in outcomes.values() if v == "ok") >= 0.6 * len(sample), outcomes


@corpus_required
@pytest.mark.parametrize(
    "rel",
    sorted(p.name for p in (CORPUS / "documents" / "tika").glob("test*_protected_passtika.*"))
    if (CORPUS / "documents" / "tika").is_dir()
    else ["(corpus absent)"],
)
def test_corpus_encrypted(rel: str) -> None:
    with pytest.raises(EncryptedDocumentError):
        parse_file(CORPUS / "documents" / "tika" / rel)


@corpus_required
@pytest.mark.parametrize("rel", ["tika/testWORD_truncated.docx", "tika/testODTnotaZipFile.odt"])
def test_corpus_corrupt(rel: str) -> None:
    with pytest.raises(CorruptDocumentError):
        parse_file(CORPUS / "documents" / rel)


@pytest.mark.parametrize("name", ["notes.odt", "sheet.ods", "book.epub"])
def test_a_zip_format_that_is_not_a_zip_is_corrupt_without_tika(name: str, tmp_path: Path) -> None:
    """Named like an OpenDocument/EPUB file but plain text: refused as corrupt
    by the container check (the Tika VM is never started for it)."""
    path = tmp_path / name
    path.write_bytes(b"This is not a zip file!\n" * 3)
    with pytest.raises(CorruptDocumentError, match="not a ZIP container"):
        parse_file(path)


@corpus_required
def test_corpus_pptx_slide_order() -> None:
    result = parse_file(CORPUS / "documents" / "unstructured" / "fake-power-point-many-pages.pptx")
    assert _els(result) == [("heading", 1, 1, "Page 1"), ("heading", 1, 2, "Page 2")]
    pages = [e.page for e in parse_file(CORPUS / "documents" / "python-pptx" / "test.pptx").elements]
    assert pages == sorted(pages) and pages[0] == 1


@corpus_required
def test_corpus_msg_subject() -> None:
    result = parse_file(CORPUS / "documents" / "unstructured" / "fake-email.msg")
    assert result.metadata["subject"] == "Test Email"
    assert _els(result)[0] == ("heading", 1, 0, "Test Email")
    assert result.elements[1].text.startswith('From: "Matthew Robinson" <mrobinson@unstructured.io>\n')
    with_attachment = parse_file(CORPUS / "documents" / "unstructured" / "fake-email-attachment.msg")
    assert _els(with_attachment)[-1] == ("paragraph", 0, 0, "Attachments: fake-attachment.txt")
    (att,) = with_attachment.attachments
    assert att.name == "fake-attachment.txt" and att.depth == 1
    child = parse(att.data, detect_mime(att.data, att.name), depth=att.depth)
    assert child.elements[0].text == "Hey this is a fake attachment!"


@corpus_required
def test_corpus_tickets() -> None:
    docs = CORPUS / "documents"
    github = parse_file(docs / "tickets-github-issues-hf-datasets" / "datasets-issues.first400.jsonl")
    assert github.metadata["records"] == "400"
    assert sum(1 for e in github.elements if e.type is ElementType.HEADING and e.level == 1) == 400
    jira = parse_file(docs / "tickets-jira-apache-lucene" / "LUCENE-6572.json")
    assert jira.elements[0].text == "LUCENE-6572: Highlighter depends on analyzers-common"
    comments = [e.text for e in jira.elements if e.text.startswith("Robert Muir (")]
    assert comments[0] == (
        "Robert Muir (2015-06-16T11:26:42.062+0000): I also don't understand why it depends on join. So messy"
    )
