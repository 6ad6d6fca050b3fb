"""A small generated sample corpus (an employee handbook) for the quick start.

Everything is generated from the deterministic text below: no downloads.
PDFs are written with fpdf2, DOCX with python-docx.
"""

from __future__ import annotations

import datetime as _dt
import io
from pathlib import Path

_EPOCH = _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc)

TOPICS: dict[str, list[str]] = {
    "Travel policy": [
        "Book flights through the corporate travel portal at least 14 days before departure.",
        "Economy class is required for flights under 6 hours; premium economy is allowed above 6 hours.",
        "Hotels must not exceed 180 EUR per night in capital cities and 130 EUR elsewhere.",
    ],
    "Expense limits": [
        "Meals are reimbursed up to 45 EUR per day when travelling, receipts required above 10 EUR.",
        "Submit expense reports within 30 days through the finance system; late claims need approval.",
        "Taxi rides are reimbursed when public transport is unavailable or after 22:00.",
    ],
    "Information security": [
        "Lock your screen when you leave your desk and never share your password.",
        "Report phishing emails to security@example.com within one hour.",
        "Laptops use full-disk encryption; customer data must never be stored on USB sticks.",
    ],
    "Onboarding": [
        "New starters receive a laptop, a badge and a buddy on their first day.",
        "Complete the compliance training within the first two weeks.",
        "Your manager schedules a 30-day and a 90-day check-in.",
    ],
    "Holidays and leave": [
        "Full-time employees receive 28 days of paid holiday per calendar year.",
        "Up to 5 unused days carry over to the next year and expire on 31 March.",
        "Parental leave is 20 weeks at full pay for all parents.",
    ],
    "Remote work": [
        "Employees may work remotely up to three days per week with manager approval.",
        "The company pays a home-office allowance of 300 EUR once per year.",
        "Core collaboration hours are 10:00 to 15:00 in the team's time zone.",
    ],
    "Code of conduct": [
        "Treat colleagues, customers and partners with respect.",
        "Gifts above 50 EUR must be declared to the compliance team.",
        "Conflicts of interest must be reported to your manager in writing.",
    ],
    "IT support": [
        "Open a ticket in the service desk portal for hardware and software issues.",
        "Password resets are self-service at https://id.example.com.",
        "Critical incidents are handled around the clock by the on-call engineer.",
    ],
}

EXPENSE_TABLE: list[list[str]] = [
    ["Category", "Limit (EUR)", "Receipt needed"],
    ["Breakfast", "15", "no"],
    ["Lunch", "20", "above 10 EUR"],
    ["Dinner", "35", "yes"],
    ["Hotel (capital)", "180", "yes"],
    ["Hotel (other)", "130", "yes"],
    ["Taxi", "60", "yes"],
]


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def markdown_page(title: str, paragraphs: list[str], *, owner: str = "people-team") -> str:
    """A wiki page with YAML front matter, headings, a list and a table.

    Args:
        title: page title (also the front-matter ``title``).
        paragraphs: body sentences.
        owner: front-matter ``owner``.

    Returns:
        Markdown text.
    """
    lines = [
        "---",
        f"title: {title}",
        f"owner: {owner}",
        "tags: [handbook, policy]",
        "---",
        "",
        f"# {title}",
        "",
        paragraphs[0],
        "",
        "## Key rules",
        "",
    ]
    lines += [f"- {p}" for p in paragraphs[1:]]
    lines += ["", "## Quick reference", "", "| Rule | Applies to |", "| --- | --- |"]
    lines += [f"| {p.split(' ')[0]} {p.split(' ')[1]} | all employees |" for p in paragraphs]
    lines += ["", "Questions? Ask in the #people channel.", ""]
    return "\n".join(lines)


def html_page(title: str, paragraphs: list[str]) -> str:
    """An intranet page with nav/header/footer boilerplate around ``<main>``.

    Args:
        title: page title.
        paragraphs: body sentences.

    Returns:
        HTML text.
    """
    items = "".join(f"<li>{p}</li>" for p in paragraphs[1:])
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{title} - Intranet</title><style>body {{font-family: sans-serif}}</style>"
        "<script>window.analytics = true;</script></head><body>"
        "<header><a href='/'>Example Corp Intranet</a></header>"
        "<nav><ul><li><a href='/'>Home</a></li><li><a href='/hr'>HR</a></li></ul></nav>"
        f"<main><h1>{title}</h1><p>{paragraphs[0]}</p><h2>Details</h2><ul>{items}</ul>"
        "<table><thead><tr><th>Item</th><th>Owner</th></tr></thead>"
        f"<tbody><tr><td>{title}</td><td>People team</td></tr></tbody></table></main>"
        "<aside>Related: <a href='/x'>Other pages</a></aside>"
        "<footer>Copyright 2024 Example Corp. All rights reserved.</footer>"
        "</body></html>"
    )


def docx_bytes(title: str, paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    """A DOCX with a Title, Heading 1/2, body text, a bulleted list and a table.

    Args:
        title: document title.
        paragraphs: body sentences (first is the intro, the rest a list).
        table: rows, header first (defaults to the expense table).

    Returns:
        The .docx bytes.
    """
    from docx import Document

    doc = Document()
    doc.core_properties.title = title
    doc.core_properties.created = _EPOCH.replace(tzinfo=None)
    doc.core_properties.modified = _EPOCH.replace(tzinfo=None)
    doc.add_heading(title, level=0)
    doc.add_heading("Overview", level=1)
    doc.add_paragraph(paragraphs[0])
    doc.add_heading("Rules", level=2)
    for p in paragraphs[1:]:
        doc.add_paragraph(p, style="List Bullet")
    doc.add_heading("Limits", level=2)
    rows = table or EXPENSE_TABLE
    tbl = doc.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            tbl.cell(r, c).text = value
    doc.add_paragraph("Contact the people team for exceptions.")
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def policy_pdf_bytes(pages: int = 4) -> bytes:
    """A multi-page PDF with a running header and footer (page numbers), headings,
    paragraphs, and a ruled table on page 2.

    Args:
        pages: number of pages (at least 3).

    Returns:
        The PDF bytes.
    """
    from fpdf import FPDF

    class _Doc(FPDF):
        def header(self) -> None:
            self.set_font("Helvetica", "I", 8)
            self.cell(0, 8, "Example Corp Employee Handbook - Internal", align="C")
            self.ln(12)

        def footer(self) -> None:
            self.set_y(-15)
            self.set_font("Helvetica", "I", 8)
            self.cell(0, 10, f"Page {self.page_no()} of {pages}", align="C")

    pdf = _Doc(format="A4")
    pdf.set_creation_date(_EPOCH)
    pdf.set_title("Employee Handbook")
    topics = list(TOPICS.items())
    for n in range(max(pages, 3)):
        pdf.add_page()
        title, sentences = topics[n % len(topics)]
        pdf.set_font("Helvetica", "B", 18)
        pdf.cell(0, 10, f"{n + 1}. {title}", new_x="LMARGIN", new_y="NEXT")
        pdf.ln(4)
        pdf.set_font("Helvetica", "", 11)
        for s in sentences:
            pdf.multi_cell(0, 6, s, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
        if n == 1:
            pdf.ln(4)
            with pdf.table(first_row_as_headings=True) as table:
                for row in EXPENSE_TABLE:
                    r = table.row()
                    for value in row:
                        r.cell(value)
            pdf.ln(4)
            pdf.multi_cell(0, 6, "Limits are reviewed every year by the finance team.")
    return bytes(pdf.output())


def two_column_pdf_bytes() -> bytes:
    """A one-page newsletter: a full-width title, then two text columns.

    The left column's paragraphs start with ``LEFT``, the right column's with
    ``RIGHT``, so reading order is easy to assert.

    Returns:
        The PDF bytes.
    """
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_creation_date(_EPOCH)
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 20)
    pdf.cell(0, 12, "Company Newsletter Spring Edition", new_x="LMARGIN", new_y="NEXT", align="C")
    pdf.ln(6)
    pdf.set_font("Helvetica", "", 10)
    col_w = 85.0
    top = pdf.get_y()
    topics = list(TOPICS.items())
    for col, (x, label) in enumerate(((10.0, "LEFT"), (115.0, "RIGHT"))):
        pdf.set_xy(x, top)
        for k in range(3):
            title, sentences = topics[col * 3 + k]
            text = f"{label} {k + 1}: {title}. " + " ".join(sentences)
            pdf.set_x(x)
            pdf.multi_cell(col_w, 5, text, new_x="LEFT", new_y="NEXT")
            pdf.ln(4)
    return bytes(pdf.output())


def text_note(title: str, paragraphs: list[str]) -> str:
    """A plain-text note: a title line and blank-line separated paragraphs.

    Args:
        title: first line.
        paragraphs: sentences, one paragraph each.

    Returns:
        The text.
    """
    return title + "\n\n" + "\n\n".join(paragraphs) + "\n"


def write_sample_corpus(dest_dir: str) -> list[str]:
    """Generate the sample corpus into ``dest_dir`` (created if missing).

    Writes Markdown wiki pages with front matter, HTML pages with nav/footer
    boilerplate, DOCX files with headings, lists and a table, a multi-page PDF
    with a table and running header/footer, a two-column PDF, plain-text
    notes, plus ``broken.pdf`` (truncated) and ``empty.txt`` (zero bytes)
    that end up as dead letters. Content is deterministic.

    Args:
        dest_dir: target folder.

    Returns:
        The written file paths, sorted.
    """
    root = Path(dest_dir)
    written: list[Path] = []

    def put(rel: str, data: bytes | str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        written.append(path)

    for title, sentences in TOPICS.items():
        put(f"wiki/{_slug(title)}.md", markdown_page(title, sentences))
    for title, sentences in list(TOPICS.items())[:6]:
        put(f"intranet/{_slug(title)}.html", html_page(title, sentences))
    for title, sentences in list(TOPICS.items())[:4]:
        put(f"policies/{_slug(title)}.docx", docx_bytes(title, sentences))
    for title, sentences in list(TOPICS.items())[4:]:
        put(f"notes/{_slug(title)}.txt", text_note(title, sentences))
    handbook = policy_pdf_bytes(4)
    put("pdf/employee-handbook.pdf", handbook)
    put("pdf/newsletter-two-column.pdf", two_column_pdf_bytes())
    put("broken/broken.pdf", handbook[: len(handbook) // 3])
    put("broken/empty.txt", b"")
    return sorted(str(p) for p in written)


__all__ = ["write_sample_corpus"]
