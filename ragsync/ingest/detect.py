"""Content-type detection and lane choice.

Binary formats are recognised from their bytes (libmagic via python-magic,
plus a look inside ZIP containers for OOXML); text is sniffed from content
(HTML, XML, JSON, CSV, Markdown, plain). The filename extension only breaks
ties between text flavours, so a renamed binary is still detected by content.
"""

from __future__ import annotations

import collections
import csv
import io
import itertools
import json
import re
import zipfile
import zlib

from ragsync.model import Lane
from ragsync.parsing._common import text_encoding
from ragsync.parsing.bundle import MIME_TICKET_BUNDLE
from ragsync.parsing.bundle import PREFIX as BUNDLE_PREFIX

MIME_PDF = "application/pdf"
MIME_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MIME_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MIME_PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
MIME_XLSB = "application/vnd.ms-excel.sheet.binary.macroenabled.12"
MIME_EML = "message/rfc822"
MIME_XPS = "application/vnd.ms-xpsdocument"
MIME_VISIO = "application/vnd.ms-visio.drawing"
MIME_EMPTY = "application/x-empty"
MIME_ENCRYPTED = "application/encrypted"

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_SNIFF_BYTES = 1 << 20
_MARKUP_SCAN = 512 << 10  # leading scripts of real pages run to a few hundred KB
_LEADING_JUNK = re.compile(
    r"\s+|<!--.*?(?:-->|\Z)|<\?xml[^>]*\?>|<!\[CDATA\[.*?\]\]>"
    r"|<(script|style|noscript|template)\b[^>]*>.*?(?:</\1\s*>|\Z)|<(?:meta|link|base)\b[^>]*>",
    re.I | re.S,
)
_HTML_ROOT = re.compile(r"<(?:!doctype\s+html|html|head|body)\b", re.I)
_DOCTYPE = re.compile(r"<!doctype\s+[\w:-]+", re.I)
_ELEMENT_OPEN = re.compile(r"<([a-zA-Z][\w:.-]*)(?:\s[^<>]*)?/?>")
_HTML_ELEMENTS = frozenset(
    ("a", "abbr", "article", "aside", "b", "blockquote", "br", "center", "code", "dd", "details", "dfn",
     "div", "dl", "dt", "em", "figure", "font", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
     "header",
     "hr", "i", "iframe", "img", "main", "nav", "ol", "p", "pre", "section", "small", "span", "strong", "sub",
     "sup", "table", "tbody", "td", "th", "thead", "title", "tr", "u", "ul")
)  # fmt: skip
_HTML_TAGS = re.compile(r"<(?:p|div|span|a\s|table|br|h[1-6]|ul|li|meta|title|script|body)\b", re.I)
_BINARY_FAMILIES = ("image/", "audio/", "video/", "font/", "model/", "chemical/")
_BINARY_WORDS = (
    "zip", "compress", "archive", "tar", "bzip", "xz", "lzma", "zstd", "rar", "pdf", "msword", "vnd.",
    "ole-storage", "CDFV2", "executable", "sharedlib", "dosexec", "mach-binary", "sqlite", "java-",
)  # fmt: skip
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


def _binary_magic(mime: str) -> bool:
    """libmagic recognised a binary format (media, archive, office, executable): not sniffed as text."""
    if mime.startswith(_BINARY_FAMILIES):
        return True
    return mime.startswith("application/") and any(word in mime for word in _BINARY_WORDS)


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
    if any(n.lower().endswith(".fdseq") for n in names):
        return MIME_XPS
    if any(n.startswith("visio/") for n in names):
        return MIME_VISIO
    if "mimetype" in names:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf, zf.open("mimetype") as member:
                # At most a line: a "mimetype" member that inflates to gigabytes is a bomb, not a type.
                declared = member.read(256).decode("ascii", "replace").strip()
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
    """The first MiB as text when it reads as text, else ``None``.

    The codec comes from ``text_encoding`` (BOMs, UTF-16 without BOM, UTF-8,
    cp1252/latin-1). Bytes are text when at most 1 % of the decoded
    characters are control characters other than tab, line and page breaks
    (NUL counts; C1 codes count unless the bytes are valid UTF-8): random or compressed bytes
    score about 12 %, so a legacy 8-bit file passes while a binary does not.
    """
    sample = data[:_SNIFF_BYTES]
    codec = text_encoding(sample)
    if codec.startswith("utf-16-"):
        sample = sample[: len(sample) // 2 * 2]
    text = sample.decode(codec, errors="replace").lstrip("\ufeff")
    if not text:
        return None
    # Valid UTF-8 is almost never binary, and C1 codes in it are real characters;
    # in an 8-bit guess they mark bytes no Western text uses.
    c1_top = 0x7F if codec.startswith("utf-8") else 0xA0
    bad = sum(1 for c in text if (ord(c) < 32 and c not in "\t\n\r\f\v\x1a") or 0x7F <= ord(c) < c1_top)
    bad += text.count("\ufffd") if codec.startswith(("utf-16", "utf-32")) else 0
    if bad <= len(text) * 0.01:
        return text
    # A page whose markup says HTML may carry a few stray binary bytes (a broken META value).
    return text if bad <= len(text) * 0.05 and _markup_start(text) == "html" else None


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


def _is_csv(text: str, *, lenient: bool = False) -> bool:
    """Delimited rows: one of ``, TAB ; |`` splits (quote-aware) the first 50
    rows into the same number (>= 2) of fields on >= 90 % of rows (>= 50 %
    when ``lenient``, i.e. the extension says CSV: titles and second tables
    are common there). A Markdown table is not CSV.
    """
    window = text[:65_536]
    if len(text) > len(window) and "\n" in window:
        window = window[: window.rindex("\n")]  # the last row may be cut by the sniff window
    nonblank = [ln for ln in window.splitlines()[:60] if ln.strip()]
    if len(nonblank) < 2:
        return False
    for delim in (",", "\t", ";", "|"):
        if delim not in window:
            continue
        if delim == "|" and all(ln.lstrip().startswith("|") for ln in nonblank):
            continue
        try:
            rows = [r for r in itertools.islice(csv.reader(io.StringIO(window), delimiter=delim), 50) if r]
        except csv.Error:
            continue
        if len(rows) < 2:
            continue
        widths = collections.Counter(len(r) for r in rows)
        width, count = widths.most_common(1)[0]
        if width >= 2 and count >= (0.5 if lenient else 0.9) * len(rows):
            return True
    return False


def _markdown_score(text: str) -> int:
    return sum(1 for pattern in _MD_PATTERNS if pattern.search(text[:200_000]))


def _is_email(text: str) -> bool:
    """An RFC 822 header block (optionally after one mbox ``From`` line) of known e-mail headers.

    An mbox (several ``From`` envelope lines) is not one e-mail and is left to text.
    """
    lines = text[:65_536].replace("\r\n", "\n").split("\n")
    envelope = bool(lines) and _ENVELOPE.match(lines[0]) is not None
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
    if envelope:  # one mbox envelope line before a header block: a single message
        return bool(known)
    return len(known) >= 3 or (len(known) >= 2 and bool(known & _EMAIL_STRONG))


def _container_by_name(filename: str) -> str:
    """The container format a file's extension names (``.docx``, ``.odt``...), ``""`` for others."""
    name = filename.lower()
    return next((mime for ext, mime in _CONTAINER_EXT.items() if name.endswith(ext)), "")


def _ole_kind(data: bytes) -> str:
    """The application of an OLE2 compound file from its stream names (case-insensitive)."""
    lowered = data.lower()
    for stream, mime in _OLE_STREAMS:
        if stream.lower().encode("utf-16-le") + b"\x00\x00" in lowered:
            return mime
    return ""


def _markup_start(text: str) -> str:
    """What a text opens with once leading whitespace, BOMs, comments, an XML
    declaration, scripts, styles and ``meta``/``link`` tags are skipped.

    Real pages often open with script blocks or comments before ``<html>``
    (libmagic then reports ``application/javascript``); this looks past them.

    Returns:
        ``"html"`` for a doctype/``html``/``head``/``body`` element, ``"fragment"``
        for a known HTML element that is closed later in the text, ``"xml"`` for
        another doctype (JATS, DocBook...), ``""`` otherwise.
    """
    rest = text[:_MARKUP_SCAN].lstrip("\ufeff")
    for _ in range(200):
        match = _LEADING_JUNK.match(rest)
        if match is None or not match.group(0):
            break
        rest = rest[match.end() :]
    if _HTML_ROOT.match(rest):
        return "html"
    element = _ELEMENT_OPEN.match(rest)
    if element is None:
        return "xml" if _DOCTYPE.match(rest) else ""
    name = element.group(1).lower()
    if name not in _HTML_ELEMENTS:
        return ""
    closed = re.search(rf"</{re.escape(name)}\s*>", text[:_MARKUP_SCAN], re.I) is not None
    return "fragment" if closed or len(_HTML_TAGS.findall(text[:20_000])) >= 5 else ""


def _text_flavour(text: str, filename: str, magic_mime: str) -> str:
    """The text type from structure first, then libmagic's hint, then the extension.

    Order: HTML by its markup (also after leading scripts and comments), XML,
    JSON/NDJSON, RTF, e-mail, Markdown (extension, or two constructs), CSV
    (quote-aware, consistent field counts), plain text.
    """
    name = filename.lower()
    markup = _markup_start(text)
    if markup == "html":
        return "text/html"
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("<?xml") and markup != "fragment":
        return "text/xml"
    if markup == "xml":
        return "text/xml"
    json_mime = _is_json(text)
    if json_mime:
        return json_mime
    if stripped.startswith("{\\rtf"):
        return "text/rtf"
    if magic_mime == MIME_EML or _is_email(text):
        return MIME_EML
    if markup == "fragment" and not name.endswith(_MD_EXT):
        return "text/html"
    if magic_mime == "text/rtf":
        return magic_mime
    if name.endswith(_MD_EXT):
        return "text/markdown"
    if name.endswith(_CSV_EXT) and _is_csv(text, lenient=True):
        return "text/csv"
    # libmagic's code types (text/x-python, text/x-c, ...) outvote '# comment' lines that look like headings.
    code = magic_mime.startswith("text/x-") and magic_mime != "text/x-markdown"
    if not code and _markdown_score(text) >= 2:
        return "text/markdown"
    if _is_csv(text) and (magic_mime == "text/csv" or name.endswith((*_CSV_EXT, ".txt")) or "." not in name):
        return "text/csv"
    return _container_by_name(name) or "text/plain"


def detect_mime(data: bytes, filename: str = "") -> str:
    """Detect a document's content type from its bytes; libmagic is evidence, not the verdict.

    1. Signatures we check ourselves: PDF, ZIP containers (opened, or scanned
       when truncated, to tell docx/xlsx/pptx/ODF/EPUB/XPS/Visio from a plain
       archive), OLE files (an ``EncryptedPackage`` is ``application/encrypted``;
       stream names tell Word/Excel/PowerPoint/Outlook/Works apart).
    2. Anything libmagic does not recognise as a binary format is decoded as
       text (``ragsync.parsing._common.text_encoding``: BOMs, UTF-16 without
       BOM, UTF-8, cp1252/latin-1, judged by its share of control characters)
       and typed by its structure: HTML by its markup even when the page opens
       with scripts, comments, a BOM or whitespace (libmagic calls such pages
       ``application/javascript``), XML, JSON/NDJSON, RTF, e-mail, Markdown,
       CSV, plain text. libmagic's answer is kept only for text without such
       structure that it names more precisely (PostScript, SVG, JavaScript...).
    3. Otherwise libmagic's type (images, archives, ...).

    The filename's extension only breaks ties between text flavours (``.md``
    -> Markdown, ``.csv`` -> CSV when the content is delimited). Magika was
    measured as further evidence and left out: ``benchmarks/detect_corpus.py``.

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
    if data.startswith(BUNDLE_PREFIX):
        return MIME_TICKET_BUNDLE  # a ticket and its attachments, as a connector fetched them
    head = data[:1024]
    if b"%PDF-" in head:
        return MIME_PDF
    if data.startswith(b"PK\x03\x04"):
        kind = _zip_kind(data) or _container_by_name(filename)
        if kind:
            return kind  # an unreadable ZIP named .docx is a broken DOCX (corrupt), not an unknown file
    if data.startswith(_OLE_MAGIC) and "EncryptedPackage".encode("utf-16-le") in data:
        return MIME_ENCRYPTED
    magic_mime = _magic(data)
    if data.startswith(_OLE_MAGIC) and magic_mime in ("application/x-ole-storage", "application/CDFV2"):
        magic_mime = _ole_kind(data) or magic_mime
    if not _binary_magic(magic_mime):
        text = _decode(data)
        if text is not None and text.strip():
            flavour = _text_flavour(text, filename, magic_mime)
            vague = magic_mime.startswith(_TEXT_MIMES) or magic_mime in ("application/octet-stream",)
            if flavour in ("text/plain", "text/xml") and not vague and magic_mime != "application/x-empty":
                return magic_mime  # libmagic names this unstructured text more precisely
            return flavour
    if magic_mime == "application/zip":
        return _zip_kind(data) or magic_mime
    return magic_mime


def needs_ocr(data: bytes, mime: str) -> bool:
    """Whether a document needs OCR: an image, or a PDF whose first pages are scans.

    A PDF is looked at cheaply (PDFium, first 3 pages, a few ms): a page
    with under 50 characters of text layer and images covering at least 5%
    of it is a scan. Later scanned pages are still OCR'd by the parser, in
    whichever lane the document went to. PDFium holds a page's decoded
    content streams: untrusted bytes come here through
    ``ragsync.parsing.route``, which checks the streams' expansion first and
    runs where the parse child's limits hold.

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
