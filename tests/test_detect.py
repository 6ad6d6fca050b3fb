"""Content-type detection and lane choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsync.ingest.detect import choose_lane, detect_mime
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


def test_text_decoded_before_it_is_typed() -> None:
    note = "This is a test document to use for unit tests.\n\nIt has two paragraphs.\n"
    assert detect_mime(note.encode("utf-16-le"), "a.txt") == "text/plain"  # no BOM
    assert detect_mime(note.encode("utf-16-be"), "a.txt") == "text/plain"
    assert detect_mime(note.encode("utf-32"), "a.txt") == "text/plain"
    assert detect_mime("Grüße, café, naïve – “quoted”\n".encode("cp1252"), "a.txt") == "text/plain"
    russian = ("Привет, это обычный текст в старой кодировке. " * 20).encode("cp1251")
    assert detect_mime(russian, "a.txt") == "text/plain"
    from ragsync.parsing import parse

    assert parse(russian, "text/plain").elements[0].text.startswith("Привет, это обычный текст")
    import hashlib

    noise = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(64))  # no BOM, no NULs pattern
    assert detect_mime(noise) == "application/octet-stream"


def test_csv_is_read_quote_aware() -> None:
    quoted = b'name,comment\nann,"likes a, b"\nbob,"multi\nline"\ncid,plain\n'
    assert detect_mime(quoted, "") == "text/csv"
    ragged = b"Title line\na,b,c\n1,2,3\n4,5,6\n7,8\n"
    assert detect_mime(ragged, "t.csv") == "text/csv"
    assert detect_mime(b"a;b;c\n1;2;3\n4;5;6\n", "x.csv") == "text/csv"


def test_single_message_mbox_and_code() -> None:
    mbox = b"From someone@example.com Mon Jun 01 10:00:00 2009\nContent-Type: text/plain\n\nHello\n"
    assert detect_mime(mbox, "one.mbox") == "message/rfc822"
    code = b"#!/usr/bin/env python\n# Copyright 2020\n# Licensed under MIT\nimport os\n\n- x = 1\n"
    assert detect_mime(code, "tool.py") == "text/plain"


def test_zip_containers_that_are_not_archives() -> None:
    import io
    import zipfile

    xps, visio = "application/vnd.ms-xpsdocument", "application/vnd.ms-visio.drawing"
    for members, mime in (
        ({"FixedDocSeq.fdseq": "<x/>", "Documents/1/Pages/1.fpage": "<x/>"}, xps),
        ({"[Content_Types].xml": "<Types/>", "visio/document.xml": "<x/>"}, visio),
        ({"readme.txt": "hello"}, "application/zip"),
    ):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for name, body in members.items():
                zf.writestr(name, body)
        assert detect_mime(buf.getvalue(), "x.bin") == mime
    assert detect_mime(b"PK\x03\x04 not a zip", "broken.docx") == DOCX
