"""Content-type detection and lane choice.

Binary formats are recognised from their bytes (libmagic via python-magic,
plus a look inside ZIP containers for OOXML); text is sniffed from content
(HTML, XML, JSON, CSV, Markdown, plain). The filename extension only breaks
ties between text flavours, so a renamed binary is still detected by content.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib

from ragsync.model import Lane

MIME_PDF = "application/pdf"
MIME_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MIME_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MIME_PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
MIME_XLSB = "application/vnd.ms-excel.sheet.binary.macroenabled.12"
MIME_EML = "message/rfc822"
MIME_EMPTY = "application/x-empty"
MIME_ENCRYPTED = "application/encrypted"

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_SNIFF_BYTES = 1 << 20
_HTML_START = re.compile(rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S)
_HTML_TAGS = re.compile(r"<(?:p|div|span|a\s|table|br|h[1-6]|ul|li|meta|title|script|body)\b", re.I)
_MD_PATTERNS = (
    re.compile(r"^#{1,6}\s+\S", re.M),  # ATX heading
    re.compile(r"^\S.*\n(?:=+|-+)[ \t]*$", re.M),  # setext heading
    re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.M),  # list item
    re.compile(r"^```|^~~~", re.M),  # fence
    re.compile(r"\[[^\]\n]+\]\([^)\s]+\)"),  # link
    re.compile(r"^\|.*\|\s*\n\|?\s*:?-{3,}", re.M),  # table
    re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__"),  # strong
    re.compile(r"\A---\s*\n(?:[\w-]+:.*\n)+---\s*\n"),  # front matter
)
_MD_EXT = (".md", ".markdown", ".mdown", ".mkd", ".mdx")
_CSV_EXT = (".csv", ".tsv")
_TEXT_MIMES = ("text/", "application/json", "application/x-ndjson", "application/xml", "application/csv")
# OLE2 compound files: a stream name (UTF-16LE in the directory) tells the application, most specific first.
_OLE_STREAMS = (
    ("__substg1.0_", "application/vnd.ms-outlook"),
    ("PowerPoint Document", "application/vnd.ms-powerpoint"),
    ("WordDocument", "application/msword"),
    ("Workbook", "application/vnd.ms-excel"),
    ("Book", "application/vnd.ms-excel"),
    ("MatOST", "application/vnd.ms-works"),
)
# Plain text under a container format's extension is a broken file of that format, not a text note.
_CONTAINER_EXT = {
    ".docx": MIME_DOCX,
    ".xlsx": MIME_XLSX,
    ".pptx": MIME_PPTX,
    ".odt": "application/vnd.oasis.opendocument.text",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".epub": "application/epub+zip",
    ".doc": "application/msword",
    ".xls": "application/vnd.ms-excel",
    ".ppt": "application/vnd.ms-powerpoint",
    ".msg": "application/vnd.ms-outlook",
}
_EMAIL_HEADERS = frozenset(
    ("from", "to", "cc", "subject", "date", "message-id", "mime-version", "received", "return-path",
     "reply-to", "delivered-to", "sender", "content-type", "x-mailer", "dkim-signature", "in-reply-to")
)  # fmt: skip
_EMAIL_STRONG = frozenset(("message-id", "mime-version", "received", "return-path", "delivered-to", "from"))
_HEADER_LINE = re.compile(r"^([!-9;-~]+):")
_ENVELOPE = re.compile(r"^From \S+ .*\d{4}\s*$", re.M)


def _magic(data: bytes) -> str:
    try:
        import magic

        return str(magic.from_buffer(data[:_SNIFF_BYTES], mime=True))
    except Exception:  # noqa: BLE001 - libmagic missing or confused: fall back to our sniffing
        return "application/octet-stream"


def _zip_kind(data: bytes) -> str:
    names: list[str]
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = zf.namelist()
    except Exception:  # noqa: BLE001 - truncated zip: scan local headers instead
        names = []
        head = data[: 4 << 20]
        for marker, mime in ((b"word/", MIME_DOCX), (b"xl/", MIME_XLSX), (b"ppt/", MIME_PPTX)):
            if marker in head:
                return mime
        if head[30:38] == b"mimetype":  # ODF/EPUB store it first, uncompressed
            size = int.from_bytes(head[18:22], "little")
            start = 38 + int.from_bytes(head[28:30], "little")
            value = head[start : start + min(size, 100)]
            if len(value) == size and re.fullmatch(rb"application/[\w.+-]+", value):
                return value.decode("ascii")
        return _content_types_kind(head)
    if any(n.startswith("word/") for n in names):
        return MIME_DOCX
    if "xl/workbook.bin" in names:
        return MIME_XLSB
    if any(n.startswith("xl/") for n in names):
        return MIME_XLSX
    if any(n.startswith("ppt/") for n in names):
        return MIME_PPTX
    if "mimetype" in names:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                declared = zf.read("mimetype").decode("ascii", "replace").strip()
            if declared.startswith("application/"):
                return declared
        except Exception:  # noqa: BLE001
            pass
    return "application/zip"


def _content_types_kind(head: bytes) -> str:
    """Truncated OOXML: inflate what is left of ``[Content_Types].xml`` and read the main part type."""
    at = head.find(b"[Content_Types].xml")
    if at < 30 or head[at - 30 : at - 26] != b"PK\x03\x04":
        return ""
    header = head[at - 30 : at]
    method = int.from_bytes(header[8:10], "little")
    extra_len = int.from_bytes(header[28:30], "little")
    payload = head[at + len("[Content_Types].xml") + extra_len :]
    try:
        xml = zlib.decompressobj(-15).decompress(payload, 1 << 20) if method == 8 else payload
    except zlib.error:
        return ""
    for marker, mime in ((b"wordprocessingml", MIME_DOCX), (b"spreadsheetml", MIME_XLSX)):
        if marker in xml:
            return mime
    return MIME_PPTX if b"presentationml" in xml else ""


def _decode(data: bytes) -> str | None:
    sample = data[:_SNIFF_BYTES]
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return sample.decode("utf-16")
        except UnicodeDecodeError:
            return None
    if b"\x00" in sample:
        return None
    try:
        return sample.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start >= len(sample) - 4:  # cut inside a multibyte character
            return sample[: exc.start].decode("utf-8-sig")
    try:
        text = sample.decode("cp1252")
    except UnicodeDecodeError:
        return None
    controls = sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f")
    return text if controls <= len(text) * 0.01 else None


def _is_json(text: str) -> str:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return ""
    try:
        json.loads(stripped)
        return "application/json"
    except ValueError:
        pass
    lines = [ln for ln in stripped.splitlines() if ln.strip()][:50]
    if len(lines) >= 2:
        try:
            for ln in lines[:-1]:  # the last line may be cut by the sniff window
                json.loads(ln)
            return "application/x-ndjson"
        except ValueError:
            return ""
    return ""


def _is_csv(text: str) -> bool:
    lines = [ln for ln in text.splitlines()[:50] if ln.strip()]
    if len(lines) < 2:
        return False
    if len(lines) == 50:
        lines = lines[:-1]
    for delim in (",", "\t", ";", "|"):
        counts = [ln.count(delim) for ln in lines]
        if counts[0] >= 1 and sum(1 for c in counts if c == counts[0]) >= 0.9 * len(counts):
            # a Markdown table is not CSV
            return not (delim == "|" and all(ln.lstrip().startswith("|") for ln in lines))
    return False


def _markdown_score(text: str) -> int:
    return sum(1 for pattern in _MD_PATTERNS if pattern.search(text[:200_000]))


def _is_email(text: str) -> bool:
    """An RFC 822 header block (optionally after one mbox ``From`` line) of known e-mail headers.

    An mbox (several ``From`` envelope lines) is not one e-mail and is left to text.
    """
    lines = text[:65_536].replace("\r\n", "\n").split("\n")
    if lines and lines[0].startswith("From "):
        if len(_ENVELOPE.findall(text[:_SNIFF_BYTES])) > 1:
            return False
        lines = lines[1:]
    names: set[str] = set()
    for line in lines[:400]:
        if not line.strip():
            break
        if line[0] in " \t":
            if not names:
                return False
            continue
        match = _HEADER_LINE.match(line)
        if match is None:
            return False
        names.add(match.group(1).lower())
    known = names & _EMAIL_HEADERS
    return len(known) >= 3 or (len(known) >= 2 and bool(known & _EMAIL_STRONG))


def _utf16_without_bom(data: bytes) -> str | None:
    head = data[:400]
    if len(head) < 40:
        return None
    half = len(head) // 2
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if odd >= 0.9 * half and even < 0.1 * half:
        encoding = "utf-16-le"
    elif even >= 0.9 * half and odd < 0.1 * half:
        encoding = "utf-16-be"
    else:
        return None
    return data[: min(len(data), _SNIFF_BYTES) // 2 * 2].decode(encoding, errors="replace")


def _ole_kind(data: bytes) -> str:
    """The application of an OLE2 compound file from its stream names (case-insensitive)."""
    lowered = data.lower()
    for stream, mime in _OLE_STREAMS:
        if stream.lower().encode("utf-16-le") + b"\x00\x00" in lowered:
            return mime
    return ""


def _text_flavour(text: str, filename: str, magic_mime: str) -> str:
    name = filename.lower()
    if _HTML_START.match(text.encode("utf-8", "replace")[:4096]):
        return "text/html"
    stripped = text.lstrip()
    if stripped.startswith("<?xml"):
        head = stripped[:2000].lower()
        return "text/html" if "<html" in head else "text/xml"
    json_mime = _is_json(text)
    if json_mime:
        return json_mime
    if stripped.startswith("{\\rtf"):
        return "text/rtf"
    if magic_mime == MIME_EML or _is_email(text):
        return MIME_EML
    if stripped.startswith("<") and (
        magic_mime == "text/html" or len(_HTML_TAGS.findall(text[:20_000])) >= 5
    ):
        return "text/html"
    if magic_mime in ("text/rtf", "text/x-tex", "message/rfc822", "message/news"):
        return magic_mime
    score = _markdown_score(text)
    if name.endswith(_MD_EXT):
        return "text/markdown"
    if name.endswith(_CSV_EXT) and _is_csv(text):
        return "text/csv"
    if score >= 2:
        return "text/markdown"
    if magic_mime == "text/csv" or (_is_csv(text) and name.endswith(_CSV_EXT + (".txt", ""))):
        return "text/csv" if _is_csv(text) else "text/plain"
    for ext, mime in _CONTAINER_EXT.items():
        if name.endswith(ext):
            return mime
    return "text/plain"


def detect_mime(data: bytes, filename: str = "") -> str:
    """Detect a document's content type from its bytes.

    Binary formats come from libmagic, except that ZIP containers are opened
    (or, when truncated, scanned) to tell docx/xlsx/pptx apart and OLE files
    holding an ``EncryptedPackage`` are reported as ``application/encrypted``.
    Text is sniffed from content: HTML, XML, JSON/NDJSON, Markdown (two or more
    Markdown constructs), CSV (a delimiter repeated evenly on every line) or
    plain text. The filename's extension only breaks ties between text
    flavours (``.md`` -> Markdown, ``.csv`` -> CSV when the content is CSV).

    Args:
        data: the bytes (only the first MiB is read for text sniffing).
        filename: the original name, optional.

    Returns:
        A standard MIME string such as ``application/pdf``, ``text/html``,
        ``text/markdown``, ``text/plain`` or the OOXML types;
        ``application/x-empty`` for zero bytes and
        ``application/octet-stream`` when nothing matches. Never raises.
    """
    if not data:
        return MIME_EMPTY
    head = data[:1024]
    if b"%PDF-" in head:
        return MIME_PDF
    if data.startswith(b"PK\x03\x04"):
        kind = _zip_kind(data)
        if kind:
            return kind
    if data.startswith(_OLE_MAGIC) and "EncryptedPackage".encode("utf-16-le") in data:
        return MIME_ENCRYPTED
    magic_mime = _magic(data)
    if data.startswith(_OLE_MAGIC) and magic_mime in ("application/x-ole-storage", "application/CDFV2"):
        magic_mime = _ole_kind(data) or magic_mime
    textual = magic_mime.startswith(_TEXT_MIMES) or magic_mime in ("application/octet-stream", "text/plain")
    if textual:
        text = _decode(data)
        if text is not None and text.strip():
            return _text_flavour(text, filename, magic_mime)
        if text is None:
            wide = _utf16_without_bom(data)
            if wide is not None and _is_email(wide):
                return MIME_EML
    if magic_mime == "application/zip":
        return _zip_kind(data) or magic_mime
    return magic_mime


def needs_ocr(data: bytes, mime: str) -> bool:
    """Whether a document needs OCR: an image, or a PDF whose first pages are scans.

    A PDF is looked at cheaply (PDFium, first 3 pages, a few ms): a page
    with under 50 characters of text layer and images covering at least 5%
    of it is a scan. Later scanned pages are still OCR'd by the parser, in
    whichever lane the document went to.

    Args:
        data: the document bytes.
        mime: detected content type.

    Returns:
        True for ``image/*`` and scanned PDFs; False otherwise, including
        PDFs PDFium cannot open (the parser reports those). Never raises.
    """
    base = mime.split(";", 1)[0].strip().lower()
    if base.startswith("image/"):
        return True
    if base != MIME_PDF or not data:
        return False
    try:
        from ragsync.parsing.ocr import pdf_needs_ocr

        return pdf_needs_ocr(data, pages=3)
    except Exception:  # noqa: BLE001 - detection must not fail; the parser decides
        return False


def choose_lane(mime: str, size: int, *, slow_bytes: int = 50_000_000, needs_ocr: bool = False) -> str:
    """Choose the processing lane for a document.

    Images, documents that need OCR (pass ``needs_ocr(data, mime)``) and
    files larger than ``slow_bytes`` go to the slow lane; everything else to
    the fast lane.

    Args:
        mime: detected content type.
        size: size in bytes.
        slow_bytes: size above which a file goes slow.
        needs_ocr: the document needs OCR (a scanned PDF).

    Returns:
        ``"fast"`` or ``"slow"`` (``Lane`` values).
    """
    if needs_ocr or mime.startswith("image/") or size > slow_bytes:
        return Lane.SLOW.value
    return Lane.FAST.value


__all__ = ["choose_lane", "detect_mime", "needs_ocr"]
