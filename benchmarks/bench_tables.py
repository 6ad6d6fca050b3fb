"""Borderless tables: render financial-report PDFs from known tables, parse them, score the cells.

Each generated document (fpdf2, deterministic seed) has a title, a paragraph,
one table WITHOUT any ruling line (a label column and 2-6 number columns:
thousands separators, percentages, negatives in parentheses; numbers right-
aligned or left-aligned; some labels wrap onto a second line; half the
tables have a total row) and a closing paragraph. Prose-only documents
(one and two columns) check that no table is invented. The same tables are
also scored with ruling lines drawn (the ruled detector). Scores, over all
documents:

* cell recall: truth cells (non-empty) found as cells of a parsed ``table``
  element (multiset, whitespace collapsed, case-insensitive);
* cell precision: parsed table cells that are truth cells;
* rows intact: truth rows whose cells all sit in one parsed Markdown row;
* header first: tables whose first Markdown row is the truth header;
* false tables: table elements on the prose-only documents.

Usage: ``python benchmarks/bench_tables.py [--docs 60] [--seed 7] [--json]``
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragsync.model import ElementType  # noqa: E402
from ragsync.parsing import parse  # noqa: E402

LABELS = [
    "Revenue from contracts with customers",
    "Cost of sales",
    "Gross profit",
    "Selling and distribution expenses",
    "Administrative expenses",
    "Research and development",
    "Other operating income",
    "Operating profit",
    "Finance income",
    "Finance costs",
    "Share of profit of associates",
    "Profit before tax",
    "Income tax expense",
    "Profit for the year",
    "Property, plant and equipment",
    "Intangible assets",
    "Trade and other receivables",
    "Cash and cash equivalents",
    "Borrowings",
    "Lease liabilities",
    "Employee benefit obligations",
    "Deferred tax liabilities",
]
HEADERS = ["2024", "2023", "Change", "Q1", "Q2", "Q3", "Q4", "Budget", "Actual", "Variance", "EUR m", "USD m"]
PROSE = (
    "The group delivered a resilient performance in a challenging market. Management continued to focus on "
    "cash generation and cost discipline, while investing in the digital platform and in new capacity. "
    "The board proposes a dividend in line with the policy set out in the previous annual report."
)


@dataclass
class Doc:
    """One generated document and its truth (header row first), or None for prose only."""

    pdf: bytes
    rows: list[list[str]] | None
    kind: str


def _number(rng: random.Random, kind: str) -> str:
    if kind == "%":
        return f"{rng.uniform(-20, 40):.1f}%"
    value = rng.randint(-9000, 250000)
    text = f"{abs(value):,}"
    return f"({text})" if value < 0 else text


def _table(rng: random.Random) -> list[list[str]]:
    cols = rng.randint(2, 6)
    header = ["In thousands"] + rng.sample(HEADERS, cols)
    kinds = ["%" if h in ("Change", "Variance") else "n" for h in header[1:]]
    labels = rng.sample(LABELS, rng.randint(4, 12))
    rows = [header] + [[label] + [_number(rng, k) for k in kinds] for label in labels]
    if rng.random() < 0.5:
        rows.append(["Total"] + [_number(rng, k) for k in kinds])
    return rows


def render(
    rows: list[list[str]] | None, rng: random.Random, *, ruled: bool = False, columns: int = 1
) -> bytes:
    """A PDF page: title, paragraph, the table (no rules unless ``ruled``), paragraph."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 15)
    pdf.set_xy(50, 50)
    pdf.cell(0, 20, "Consolidated statement of results")
    pdf.set_font("Helvetica", size=10)
    if rows is None:
        width = 495 / columns - (10 if columns > 1 else 0)
        for c in range(columns):
            pdf.set_xy(50 + c * (width + 20), 90)
            pdf.multi_cell(width, 13, (PROSE + " ") * 4)
        return bytes(pdf.output())
    pdf.set_xy(50, 85)
    pdf.multi_cell(495, 13, PROSE)
    label_w = rng.choice([150, 180, 210])
    num_w = min(70.0, (495 - label_w) / (len(rows[0]) - 1))
    align = rng.choice(["R", "L"])
    y = 150.0
    for r, row in enumerate(rows):
        pdf.set_font("Helvetica", "B" if r == 0 or row[0] == "Total" else "", 9)
        label = row[0]
        wrap = pdf.get_string_width(label) > label_w - 6
        pdf.set_xy(50, y)
        pdf.multi_cell(label_w - 6, 11, label, align="L")
        for j, cell in enumerate(row[1:]):
            pdf.set_xy(50 + label_w + j * num_w, y)
            pdf.cell(num_w - 6, 11, cell, align=align)
        height = 22 if wrap else 11
        if ruled:
            pdf.line(50, y - 2, 50 + label_w + num_w * (len(row) - 1), y - 2)
            for x in [50 + label_w + j * num_w for j in range(len(row))] + [50]:
                pdf.line(x - 3, y - 2, x - 3, y + height + 2)
        y += height + 4
    if ruled:
        pdf.line(50, y - 2, 50 + label_w + num_w * (len(rows[0]) - 1), y - 2)
    pdf.set_xy(50, y + 20)
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(495, 13, "Net debt fell over the year as operating cash flow covered investment.")
    return bytes(pdf.output())


def documents(n: int, seed: int) -> list[Doc]:
    """``n`` borderless table documents, ``n // 4`` ruled ones, and prose-only documents."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        rows = _table(rng)
        docs.append(Doc(render(rows, rng), rows, "borderless"))
    for _ in range(max(n // 4, 1)):
        rows = _table(rng)
        docs.append(Doc(render(rows, rng, ruled=True), rows, "ruled"))
    for columns in (1, 2, 1, 2):
        docs.append(Doc(render(None, rng, columns=columns), None, f"prose ({columns} col)"))
    return docs


def _norm(text: str) -> str:
    return " ".join(text.replace("\\|", "|").split()).lower()


def _md_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        line = line.strip()
        if re.fullmatch(r"\|(\s*-{3,}\s*\|)+", line):
            continue
        rows.append([_norm(c) for c in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows


def score(docs: list[Doc]) -> dict[str, Any]:
    """Parse every document and score cells, rows and headers per kind."""
    out: dict[str, Counter[str]] = {}
    for doc in docs:
        stats = out.setdefault(doc.kind, Counter())
        stats["docs"] += 1
        t0 = time.process_time()
        result = parse(doc.pdf, "application/pdf")
        stats["cpu_ms"] += int((time.process_time() - t0) * 1000)
        tables = [_md_rows(e.text) for e in result.elements if e.type == ElementType.TABLE]
        stats["tables"] += len(tables)
        if doc.rows is None:
            stats["false_tables"] += len(tables)
            continue
        truth = [[_norm(c) for c in row] for row in doc.rows]
        got = Counter(c for t in tables for row in t for c in row if c)
        want = Counter(c for row in truth for c in row if c)
        stats["truth_cells"] += sum(want.values())
        stats["parsed_cells"] += sum(got.values())
        stats["matched_cells"] += sum((got & want).values())
        parsed_rows = [row for t in tables for row in t]
        stats["truth_rows"] += len(truth)
        stats["rows_intact"] += sum(
            1 for row in truth if any(Counter(c for c in row if c) <= Counter(pr) for pr in parsed_rows)
        )
        stats["header_first"] += int(bool(tables) and tables[0][0] == truth[0])
    summary: dict[str, Any] = {}
    for kind, s in out.items():
        row: dict[str, Any] = {
            "docs": s["docs"],
            "tables": s["tables"],
            "cpu_ms_per_doc": s["cpu_ms"] / s["docs"],
        }
        if s["truth_cells"]:
            row["cell_recall"] = round(s["matched_cells"] / s["truth_cells"], 3)
            row["cell_precision"] = round(s["matched_cells"] / max(s["parsed_cells"], 1), 3)
            row["rows_intact"] = round(s["rows_intact"] / s["truth_rows"], 3)
            row["header_first"] = round(s["header_first"] / s["docs"], 3)
        else:
            row["false_tables"] = s["false_tables"]
        summary[kind] = row
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--docs", type=int, default=60, help="borderless table documents (ruled: a quarter as many)"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    summary = score(documents(args.docs, args.seed))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    head = (
        "documents",
        "n",
        "tables",
        "cell recall",
        "cell precision",
        "rows intact",
        "header first",
        "false tables",
    )
    print("| " + " | ".join(head) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, r in summary.items():
        print(
            f"| {kind} | {r['docs']} | {r['tables']} | {r.get('cell_recall', '')} "
            f"| {r.get('cell_precision', '')} | {r.get('rows_intact', '')} | {r.get('header_first', '')} "
            f"| {r.get('false_tables', '')} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
