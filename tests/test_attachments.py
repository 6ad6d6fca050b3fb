"""Attachments: archive members and e-mail attachments returned as child documents,
archive limits (archive_bomb), hostile member names, child ids; generated
fixtures plus real archives and e-mails from the shared corpus."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from email.message import EmailMessage

import pytest

from ragsync.config import Settings
from ragsync.errors import (
    ERROR_CLASSES,
    ArchiveBombError,
    ConfigurationError,
    CorruptDocumentError,
    NoTextError,
    classify,
    is_retryable,
)
from ragsync.ids import child_object_id, doc_id
from ragsync.ingest.detect import detect_mime
from ragsync.parsing import ArchiveLimits, parse
from ragsync.parsing.archive import safe_name
from tests.corpus import corpus_dir

CORPUS = corpus_dir()
corpus_required = pytest.mark.skipif(
    not (CORPUS / "documents").is_dir(), reason="shared corpus absent (../shared/corpus or $RAGSYNC_CORPUS)"
)


def _zip(members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return buf.getvalue()


def _tar(members: dict[str, bytes], *, mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, encoding="utf-8", errors="surrogateescape") as tf:  # type: ignore[call-overload]
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def _parse(data: bytes, name: str, **kwargs: object) -> object:
    return parse(data, detect_mime(data, name), filename=name, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- archives


def test_zip_members_become_attachments_and_the_listing_is_the_text() -> None:
    data = _zip({"docs/a.txt": b"alpha text\n", "b.md": b"# Bee\n\nbody\n", "docs/": b""})
    assert detect_mime(data, "x.zip") == "application/zip"
    result = parse(data, "application/zip", filename="bundle.zip")
    assert [(e.type.value, e.level, e.text) for e in result.elements] == [
        ("heading", 1, "Archive: bundle.zip (2 files)"),
        ("list_item", 1, "docs/a.txt (11 bytes)"),
        ("list_item", 1, "b.md (12 bytes)"),
    ]
    assert [(a.name, a.data, a.depth, a.media_type) for a in result.attachments] == [
        ("docs/a.txt", b"alpha text\n", 1, ""),
        ("b.md", b"# Bee\n\nbody\n", 1, ""),
    ]
    assert result.metadata == {"members": "2", "expanded_bytes": "23"}
    child = parse(result.attachments[1].data, detect_mime(result.attachments[1].data, "b.md"), depth=1)
    assert child.elements[0].text == "Bee"


def test_tar_tgz_and_gz() -> None:
    members = {"notes/one.txt": b"one\n", "two.csv": b"a,b\n1,2\n"}
    tar = _tar(members)
    assert detect_mime(tar, "x.tar") == "application/x-tar"
    assert [a.name for a in parse(tar, "application/x-tar").attachments] == ["notes/one.txt", "two.csv"]
    tgz = _tar(members, mode="w:gz")
    assert detect_mime(tgz, "x.tgz") == "application/gzip"
    result = parse(tgz, "application/gzip", filename="x.tgz")
    assert {a.name: a.data for a in result.attachments} == members
    single = gzip.compress(b"just one file\n")
    result = parse(single, detect_mime(single, "log.txt.gz"), filename="log.txt.gz")
    assert [(a.name, a.data) for a in result.attachments] == [("log.txt", b"just one file\n")]


def test_office_files_inside_an_archive_stay_documents() -> None:
    inner_docx = _zip({"word/document.xml": b"<w:document/>", "[Content_Types].xml": b"<Types/>"})
    result = parse(_zip({"report.docx": inner_docx}), "application/zip")
    assert [a.name for a in result.attachments] == ["report.docx"]  # not expanded as an archive


def test_nested_archives_are_expanded_with_their_path_and_depth() -> None:
    inner = _zip({"deep.txt": b"deep\n"})
    middle = _tar({"inner.zip": inner, "mid.txt": b"mid\n"})
    outer = _zip({"middle.tar": middle, "top.txt": b"top\n"})
    result = parse(outer, "application/zip", filename="outer.zip")
    assert [(a.name, a.depth) for a in result.attachments] == [
        ("middle.tar/inner.zip/deep.txt", 3),
        ("middle.tar/mid.txt", 2),
        ("top.txt", 1),
    ]
    assert [e.text for e in result.elements][1:] == [
        "middle.tar (10240 bytes)",
        f"middle.tar/inner.zip ({len(inner)} bytes)",
        "middle.tar/inner.zip/deep.txt (5 bytes)",
        "middle.tar/mid.txt (4 bytes)",
        "top.txt (4 bytes)",
    ]


def test_depth_bomb() -> None:
    data = _zip({"core.txt": b"x"})
    for level in range(6):
        data = _zip({f"level{level}.zip": data})
    with pytest.raises(ArchiveBombError, match="nested deeper than 3"):
        parse(data, "application/zip", filename="russian-doll.zip")
    # a child already two containers deep has less room
    two = _zip({"a.zip": _zip({"b.txt": b"b"})})
    assert [a.depth for a in parse(two, "application/zip").attachments] == [2]
    with pytest.raises(ArchiveBombError):
        parse(two, "application/zip", depth=2)


def test_zip_bomb_by_ratio() -> None:
    bomb = _zip({"zeros.bin": b"\0" * (20 << 20)})  # 20 MiB of zeros -> ~20 KB
    assert len(bomb) < 100_000
    with pytest.raises(ArchiveBombError, match="times its compressed size"):
        parse(bomb, "application/zip", filename="bomb.zip")


def test_gzip_bomb_by_ratio() -> None:
    with pytest.raises(ArchiveBombError, match="gzip stream expands"):
        parse(gzip.compress(b"\0" * (20 << 20)), "application/gzip", filename="bomb.gz")


def test_total_bytes_and_member_limits() -> None:
    members = {f"f{i}.bin": bytes(range(256)) * 2048 for i in range(4)}  # 4 x 512 KiB, ratio ~ 1
    data = _zip(members, compression=zipfile.ZIP_STORED)
    assert len(parse(data, "application/zip").attachments) == 4
    with pytest.raises(ArchiveBombError, match="expands past 1048576 bytes"):
        parse(data, "application/zip", limits=ArchiveLimits(max_bytes=1 << 20))
    with pytest.raises(ArchiveBombError, match="more than 3 members|4 members, above 3"):
        parse(data, "application/zip", limits=ArchiveLimits(max_members=3))
    nested_many = _zip({"a.zip": _zip({f"{i}.txt": b"x" for i in range(3)}), "b.txt": b"y"})
    with pytest.raises(ArchiveBombError, match="more than 3 members"):  # nested members count too
        parse(nested_many, "application/zip", limits=ArchiveLimits(max_members=3))


def test_limits_come_from_settings(tmp_path: object) -> None:
    settings = Settings(home=str(tmp_path), max_archive_members=2, max_archive_depth=1)
    limits = settings.archive_limits()
    assert limits == ArchiveLimits(max_bytes=512 * 1024 * 1024, max_members=2, max_depth=1, max_ratio=200.0)
    with pytest.raises(ArchiveBombError):
        parse(_zip({"a": b"1", "b": b"2", "c": b"3"}), "application/zip", limits=limits)
    with pytest.raises(ConfigurationError):
        Settings(home=str(tmp_path), max_archive_depth=0)


def test_hostile_names_are_only_labels() -> None:
    raw = _zip({"caf?.txt": b"oem", "../../etc/passwd": b"p", "/abs/x.txt": b"a", "a\\b\x07.txt": b"c"})
    raw = raw.replace(b"caf?.txt", b"caf\x82.txt")  # an OEM (cp437) name without the UTF-8 flag
    result = parse(raw, "application/zip")
    assert [a.name for a in result.attachments] == ["café.txt", "etc/passwd", "abs/x.txt", "a/b.txt"]
    tar = _tar({"caf\udce9.txt": b"latin-1 name", "dup.txt": b"1", "./dup.txt": b"2", "x/../dup.txt": b"3"})
    assert [a.name for a in parse(tar, "application/x-tar").attachments] == [
        "café.txt",
        "dup.txt",
        "dup.txt~2",
        "x/dup.txt",
    ]
    assert safe_name(b"\xff\xfe/..//.") == "ÿþ"
    assert safe_name("") == ""


def test_empty_and_broken_archives_dead_letter() -> None:
    with pytest.raises(NoTextError):
        parse(_zip({}), "application/zip")
    whole = _zip({"a.txt": b"hello " * 1000, "b.txt": b"world " * 1000})
    with pytest.raises(CorruptDocumentError):
        parse(whole[: len(whole) // 2], "application/zip", filename="cut.zip")
    packed = gzip.compress(b"hello " * 1000)
    with pytest.raises(CorruptDocumentError):
        parse(packed[: len(packed) // 2], "application/gzip", filename="cut.gz")


def test_archive_bomb_error_class() -> None:
    assert "archive_bomb" in ERROR_CLASSES
    assert not is_retryable("archive_bomb")
    assert classify("ragsync.errors.ArchiveBombError") == "archive_bomb"


# --------------------------------------------------------------------------- child ids


def test_child_object_id_is_stable_and_collision_safe() -> None:
    assert child_object_id("mail/42.eml", "report.pdf") == "mail/42.eml#report.pdf"
    assert child_object_id("a.zip", "x/y#1%.txt\n") == "a.zip#x/y%231%25.txt%0A"
    nested = child_object_id(child_object_id("a.zip", "inner.zip"), "b.txt")
    assert nested == "a.zip#inner.zip#b.txt"
    # ("p", "a#b") and ("p#a", "b") must not meet
    assert child_object_id("p", "a#b") != child_object_id("p#a", "b")
    assert doc_id("t", "s", child_object_id("p", "a")) != doc_id("t", "s", "p")


# --------------------------------------------------------------------------- e-mail


def test_eml_inline_image_is_not_an_attachment() -> None:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@example.com", "b@example.com", "Logo"
    msg.set_content("plain body\n")
    msg.add_alternative('<p>body <img src="cid:logo1"></p>', subtype="html")
    html_part = msg.get_payload()[1]
    html_part.add_related(b"\x89PNG fake", maintype="image", subtype="png", cid="<logo1>")
    msg.add_attachment(b"%PDF-1.4 fake", maintype="application", subtype="pdf", filename="../../q3.pdf")
    result = parse(bytes(msg), "message/rfc822")
    assert [(a.name, a.media_type) for a in result.attachments] == [("q3.pdf", "application/pdf")]


@corpus_required
def test_corpus_eml_with_attachments() -> None:
    path = CORPUS / "documents" / "tika" / "testRFC822_multipart_attachments.eml"
    result = _parse(path.read_bytes(), path.name)
    assert [(a.name, a.media_type, a.depth) for a in result.attachments] == [  # type: ignore[attr-defined]
        ("Test TxtA.txt", "text/plain", 1),
        ("Test TxtB.txt", "text/plain", 1),
    ]
    assert result.elements[-1].text == "Attachments: Test TxtA.txt, Test TxtB.txt"  # type: ignore[attr-defined]
    forwarded = CORPUS / "documents" / "tika" / "testGroupWiseEml.eml"
    result = _parse(forwarded.read_bytes(), forwarded.name)
    names = [(a.name, a.media_type) for a in result.attachments]  # type: ignore[attr-defined]
    assert names == [("test.eml", "message/rfc822"), ("Neues Textdokument.txt", "text/plain")]
    inner = result.attachments[0]  # type: ignore[attr-defined]
    assert detect_mime(inner.data, inner.name) == "message/rfc822"
    assert parse(inner.data, "message/rfc822", depth=inner.depth).elements


@corpus_required
def test_corpus_msg_with_attachments() -> None:
    path = CORPUS / "documents" / "tika" / "testMSG_att_doc.msg"
    result = _parse(path.read_bytes(), path.name)
    got = {a.name: a for a in result.attachments}  # type: ignore[attr-defined]
    assert sorted(got) == ["pj1.txt", "test-unicode.doc"]
    doc = got["test-unicode.doc"]
    assert detect_mime(doc.data, doc.name) == "application/msword"
    text = " ".join(e.text for e in result.elements)  # type: ignore[attr-defined]
    assert "Attachments: " in text
    embedded = _parse((CORPUS / "documents" / "tika" / "testMSG_att_msg.msg").read_bytes(), "x.msg")
    assert [a.name for a in embedded.attachments] == ["smbprn.00009008.KdcPjl.pdf"]  # type: ignore[attr-defined]
    assert embedded.metadata["attachments_not_extracted"] == "Test Attachment"  # type: ignore[attr-defined]


@corpus_required
def test_corpus_zip() -> None:
    path = CORPUS / "documents" / "unstructured" / "simple.zip"
    result = _parse(path.read_bytes(), path.name)
    assert [(a.name, len(a.data)) for a in result.attachments] == [  # type: ignore[attr-defined]
        ("ideas-page.html", 6161),
        ("stanley-cups.csv", 89),
    ]
    page = result.attachments[0]  # type: ignore[attr-defined]
    assert page.data == (CORPUS / "documents" / "unstructured" / "ideas-page.html").read_bytes()
    assert detect_mime(page.data, page.name) == "text/html"
