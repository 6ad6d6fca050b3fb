"""Content-type detection and lane choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsync.detect import choose_lane, detect_mime
from tests.corpus import corpus_dir
from tests.fixtures_gen import write_fixtures

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
CORPUS = corpus_dir()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_fixtures(tmp_path_factory.mktemp("detect"))


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("wiki_page.md", "text/markdown"),
        ("security_faq.md", "text/markdown"),
        ("intranet.html", "text/html"),
        ("benefits.html", "text/html"),
        ("policy.docx", DOCX),
        ("note.txt", "text/plain"),
        ("handbook.pdf", "application/pdf"),
    ],
)
def test_fixture_types(fixtures: dict[str, Path], name: str, mime: str) -> None:
    assert detect_mime(fixtures[name].read_bytes(), name) == mime


def test_renamed_binary_detected_by_content(fixtures: dict[str, Path]) -> None:
    assert detect_mime(fixtures["policy.docx"].read_bytes(), "notes.md") == DOCX
    assert detect_mime(fixtures["handbook.pdf"].read_bytes(), "readme.txt") == "application/pdf"
    assert detect_mime(fixtures["intranet.html"].read_bytes(), "page.txt") == "text/html"


def test_markdown_by_content_without_extension(fixtures: dict[str, Path]) -> None:
    assert detect_mime(fixtures["security_faq.md"].read_bytes(), "") == "text/markdown"


def test_extension_breaks_text_ties() -> None:
    plain = b"Just a sentence.\n\nAnother one.\n"
    assert detect_mime(plain, "") == "text/plain"
    assert detect_mime(plain, "x.md") == "text/markdown"


def test_text_flavours() -> None:
    assert detect_mime(b'{"a": 1, "b": [1, 2]}') == "application/json"
    assert detect_mime(b"name,age\nann,31\nbob,42\n", "people.csv") == "text/csv"
    assert detect_mime(b"") == "application/x-empty"


def test_xlsx_and_pptx_from_zip_members() -> None:
    import io
    import zipfile

    for member, mime in (
        ("xl/workbook.xml", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        ("ppt/presentation.xml", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("[Content_Types].xml", "<Types/>")
            zf.writestr(member, "<x/>")
        assert detect_mime(buf.getvalue(), "file.docx") == mime


def test_lanes() -> None:
    assert choose_lane("application/pdf", 1000) == "fast"
    assert choose_lane("image/png", 1000) == "slow"
    assert choose_lane("text/plain", 60_000_000) == "slow"
    assert choose_lane("text/plain", 10, slow_bytes=5) == "slow"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present (../shared/corpus)")
@pytest.mark.parametrize(
    ("rel", "mime"),
    [
        ("documents/pdfjs/tracemonkey.pdf", "application/pdf"),
        ("documents/tika/testWORD_truncated.docx", DOCX),
        ("documents/pdfplumber/empty.pdf", "application/x-empty"),
    ],
)
def test_corpus_types(rel: str, mime: str) -> None:
    path = CORPUS / rel
    assert detect_mime(path.read_bytes(), path.name) == mime
