"""Generate small parser fixtures the project owns (no corpus files copied)."""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

from ragsync.ops import samples

MARKDOWN_EXTRA = """---
title: Security FAQ
owner: security-team
---

Security FAQ
============

Intro paragraph with a [link](https://example.com) and **bold** text.

Passwords
---------

- Use a password manager.
  - Nested: rotate shared secrets yearly.
- Enable MFA everywhere.

```bash
ssh-keygen -t ed25519
```

| Control | Owner |
|---|---|
| MFA | IT |
| Backups | Ops |
"""

HTML_EXTRA = """<html><head><title>Benefits</title></head><body>
<nav>Home | HR | IT</nav>
<div class="content"><h1>Benefits</h1><p>Loose <b>text</b> here.</p>
<ul><li>Health insurance<ul><li>Dental included</li></ul></li><li>Gym subsidy</li></ul>
<table><tr><td>Benefit</td><td>Value</td></tr><tr><td>Gym</td><td>30 EUR</td></tr></table>
</div><footer>Footer text</footer></body></html>
"""


def text_pdf_bytes(lines: list[str]) -> bytes:
    """A one-page PDF with a text layer: ``lines`` in 12 pt Helvetica, one per line."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    for line in lines:
        pdf.cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def long_pdf_bytes(
    pages: int, paragraph: Callable[[int, int], str], chapter: Callable[[int], str] | None = None
) -> bytes:
    """A long text PDF (A4, points): on every page a running header, a
    "Page N of M" footer, ``chapter(page)`` as a 16 pt heading when given and
    not empty, then three 11 pt paragraphs ``paragraph(page, 0..2)``."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.set_auto_page_break(False)
    for page in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", size=8)
        pdf.set_xy(40, 20)
        pdf.cell(0, 10, "Annual Report of the Long Document Society")
        pdf.set_xy(40, 800)
        pdf.cell(0, 10, f"Page {page} of {pages}")
        pdf.set_xy(40, 70)
        heading = chapter(page) if chapter is not None else ""
        if heading:
            pdf.set_font("Helvetica", size=16)
            pdf.cell(0, 20, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        for para in range(3):
            pdf.set_x(40)
            pdf.multi_cell(500, 14, paragraph(page, para))
            pdf.ln(8)
    return bytes(pdf.output())


def xlsx_bytes() -> bytes:
    """An XLSX with two sheets (a header row first) and one empty sheet."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Budget"
    ws.append(["Team", "Q1", "Q2"])
    ws.append(["Sales", 1200, 1350.5])
    ws.append(["Support", 800, None])
    people = wb.create_sheet("People")
    people.append(["Name", "Role"])
    people.append(["Ann", "Lead | Ops"])
    wb.create_sheet("Empty")
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def pptx_bytes() -> bytes:
    """A PPTX with 3 slides: bullets, a table and a text box, and speaker notes."""
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Quarterly review"
    body = slide.placeholders[1].text_frame
    body.text = "Revenue grew"
    sub = body.add_paragraph()
    sub.text = "Mostly in EMEA"
    sub.level = 1
    slide.notes_slide.notes_text_frame.text = "Mention the EMEA hires."
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Numbers"
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["Region", "Revenue"], ["EMEA", "40"], ["APAC", "25"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(1))
    box.text_frame.text = "Questions welcome"
    slide.notes_slide.notes_text_frame.text = "Close with the roadmap."
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def eml_bytes(docx: bytes) -> bytes:
    """An e-mail with a plain and an HTML body, a DOCX and a text attachment, and an unparsable one."""
    msg = EmailMessage()
    msg["From"] = "Ann Example <ann@example.com>"
    msg["To"] = "team@example.com"
    msg["Cc"] = "boss@example.com"
    msg["Date"] = "Tue, 05 Mar 2024 10:00:00 +0000"
    msg["Subject"] = "Travel policy update"
    msg["Message-ID"] = "<fixture-1@example.com>"
    msg.set_content("Hi team,\n\nThe travel policy changed. See the attachments.\n")
    msg.add_alternative(
        "<html><body><h1>Update</h1><p>The travel policy <b>changed</b>.</p></body></html>", "html"
    )
    msg.add_attachment(docx, maintype="application", subtype="octet-stream", filename="policy.docx")
    msg.add_attachment("Remember to book early.\n", filename="note.txt")
    msg.add_attachment(
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, maintype="image", subtype="png", filename="logo.png"
    )
    return bytes(msg)


def eml_html_only_bytes() -> bytes:
    """An e-mail whose only body is HTML."""
    msg = EmailMessage()
    msg["From"] = "it@example.com"
    msg["To"] = "all@example.com"
    msg["Subject"] = "Maintenance window"
    msg["Date"] = "Wed, 06 Mar 2024 09:00:00 +0000"
    msg.set_content(
        "<html><body><p>Systems are down on <b>Saturday</b>.</p>"
        "<ul><li>VPN</li><li>Mail</li></ul></body></html>",
        subtype="html",
    )
    return bytes(msg)


GITHUB_ISSUE = {
    "url": "https://api.github.com/repos/acme/app/issues/42",
    "html_url": "https://github.com/acme/app/issues/42",
    "number": 42,
    "title": "Login fails with SSO",
    "user": {"login": "ann"},
    "state": "open",
    "labels": [{"name": "bug"}, {"name": "auth"}],
    "assignees": [],
    "created_at": "2024-03-01T10:00:00Z",
    "closed_at": None,
    "body": "Steps:\r\n\r\n1. Open the app\r\n2. Click *SSO*\r\n\r\n## Expected\r\n\r\nA session.",
    "comments": [
        {"user": {"login": "bob"}, "created_at": "2024-03-02T08:00:00Z", "body": "Reproduced on staging."},
        {"user": {"login": "ann"}, "created_at": "2024-03-03T08:00:00Z", "body": "Fixed by #43.\n\nThanks!"},
    ],
}

JIRA_ISSUE = {
    "key": "OPS-7",
    "fields": {
        "summary": "Backups run twice",
        "issuetype": {"name": "Bug"},
        "status": {"name": "Resolved"},
        "priority": {"name": "Major"},
        "reporter": {"displayName": "Carla Ops", "name": "carla"},
        "assignee": None,
        "labels": ["backup"],
        "created": "2024-01-10T12:00:00.000+0000",
        "description": "The cron job fires twice.\n\nSee the attached log.",
        "comment": {
            "comments": [
                {"author": {"displayName": "Dan Dev"}, "created": "2024-01-11T09:00:00.000+0000",
                 "body": "Duplicate entry in crontab."},
            ]
        },
    },
    "changelog": {
        "histories": [
            {"author": {"displayName": "Dan Dev"}, "created": "2024-01-12T09:00:00.000+0000",
             "items": [{"field": "status", "fromString": "Open", "toString": "Resolved"}]},
        ]
    },
}  # fmt: skip


def write_fixtures(dest: Path) -> dict[str, Path]:
    """Write every fixture into ``dest``.

    Args:
        dest: an existing or new folder.

    Returns:
        Fixture name -> path (names are the golden file stems).
    """
    dest.mkdir(parents=True, exist_ok=True)
    title, sentences = next(iter(samples.TOPICS.items()))
    files: dict[str, bytes] = {
        "wiki_page.md": samples.markdown_page(title, sentences).encode(),
        "security_faq.md": MARKDOWN_EXTRA.encode(),
        "intranet.html": samples.html_page(title, sentences).encode(),
        "benefits.html": HTML_EXTRA.encode(),
        "policy.docx": samples.docx_bytes(title, sentences),
        "note.txt": samples.text_note(title, sentences).encode(),
        "handbook.pdf": samples.policy_pdf_bytes(4),
        "two_column.pdf": samples.two_column_pdf_bytes(),
        "budget.xlsx": xlsx_bytes(),
        "review.pptx": pptx_bytes(),
        "policy_update.eml": eml_bytes(samples.docx_bytes(title, sentences)),
        "maintenance.eml": eml_html_only_bytes(),
        "github_issue.json": json.dumps(GITHUB_ISSUE, indent=2).encode(),
        "jira_issue.json": json.dumps(JIRA_ISSUE).encode(),
    }
    out: dict[str, Path] = {}
    for name, data in files.items():
        path = dest / name
        path.write_bytes(data)
        out[name] = path
    return out


def flate_bomb_pdf(decoded_mib: int) -> bytes:
    """A one-page PDF whose content stream inflates to ``decoded_mib`` MiB of
    spaces (~1000x its size: 1.5 GiB from ~1.6 MB), made in about a second:
    each MiB is deflated once after a full flush (which resets the window,
    so every later MiB deflates to the same bytes) and repeated, then closed
    with the Adler-32 of the whole (a valid zlib stream)."""
    block = b" " * (1 << 20)
    pack = zlib.compressobj(9)
    first = pack.compress(block) + pack.flush(zlib.Z_FULL_FLUSH)
    again = pack.compress(block) + pack.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(decoded_mib):
        adler = zlib.adler32(block, adler)
    # b"\x03\x00": an empty final block (fixed Huffman), then the checksum.
    stream = first + again * (decoded_mib - 1) + b"\x03\x00" + adler.to_bytes(4, "big")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = b"%PDF-1.4\n"
    for n, body in enumerate(objects, 1):
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    return out + b"trailer\n<< /Root 1 0 R /Size 5 >>\n%%EOF\n"
