"""Document understanding: parse quality against the shared corpus's ground truth.

Every metric is reported together with the ``nature`` of its ground truth as
``GROUND_TRUTH_INDEX.tsv`` states it: most of it is another tool's accepted
output (a regression snapshot: docling, tabula), which tells us how close we
are to that tool, not whether we are right; only the OCR transcriptions, the
PubTabNet cells and the pdfplumber test assertions are written or checked by
people.

Metrics
-------

Tokens: ``[^\\W_]+`` runs of the lower-cased text (Unicode letters and digits;
punctuation, underscores and Markdown syntax fall away). The parsed side is the
elements' texts joined with newlines (tables are Markdown, so their cell words
count). The ground-truth Markdown is stripped first: HTML comments
(``<!-- image -->``), HTML tags, image references, link targets
(``[text](url)`` -> ``text``) and table separator rows.

* text recall: multiset recall of ground-truth tokens,
  ``sum(min(gt[t], parsed[t])) / len(gt tokens)``;
* order: ``1 - levenshtein(gt tokens, parsed tokens) / max(len)`` over the two
  token sequences (each capped at the first ``ORDER_CAP`` tokens). Extra parsed
  text (page headers, alt text) and missing text lower it as well as
  reordering, so read it next to recall;
* table cell accuracy (strict): expected cells (non-empty after whitespace
  collapse) found as a cell of a parsed Markdown table of the same document.
  Cells are compared after whitespace collapse and lower-casing, with
  backslash escapes of ``|`` undone; each parsed cell may match one expected
  cell (multiset). Parsed tables are the ``table`` elements' Markdown rows
  split on unescaped ``|``; the separator row is ignored. Cell position is not
  checked (a transposed or shifted table still scores), so this is a recall of
  cell values inside table structure;
* table cell accuracy (lenient): the same expected cells found as a substring
  of the whitespace-collapsed, lower-cased parsed text (any element), i.e.
  "the value was extracted at all";
* OCR CER: ``char_error_rate`` (Levenshtein / reference length, whitespace
  collapsed) of the parsed image text against the transcription; a word split
  at a line end (``ex-\\nplain``) is rejoined in the reference;
* reading order on multi-column PDFs: the order score above, against docling
  snapshots where they exist and, for ``pdfjs/tracemonkey.pdf`` (no ground truth
  in the index), against PDFium's raw content-stream text order as a proxy
  (LaTeX writes columns in reading order): labelled as such.

Usage::

    python benchmarks/eval_parse.py [--max-per-format N] [--only METRIC ...] [--json]
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragsync.errors import RagsyncError  # noqa: E402
from ragsync.ingest.detect import detect_mime  # noqa: E402
from ragsync.model import ElementType  # noqa: E402
from ragsync.parsing import ParseResult, parse  # noqa: E402
from ragsync.parsing.ocr_quality import char_error_rate, edit_distance  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
ORDER_CAP = 20_000
TOKEN = re.compile(r"[^\W_]+")
METRICS = ("text", "tables", "ocr", "order")
# Two-column inputs scored for reading order (docling snapshot where the index has one).
TWO_COLUMN = ("documents/docling/pdf/sources/2305.03393v1-pg9.pdf",)
TRACEMONKEY = "documents/pdfjs/tracemonkey.pdf"


@dataclass
class Row:
    """One scored input."""

    metric: str
    group: str
    input: str
    nature: str
    scores: dict[str, float] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


# --------------------------------------------------------------------------- helpers


def tokens(text: str) -> list[str]:
    """Lower-cased letter/digit runs."""
    return TOKEN.findall(text.lower())


_MD_STRIP = [
    (re.compile(r"<!--.*?-->", re.S), " "),
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), " "),
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"<[^>\n]+>"), " "),
    (re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.M), " "),
]


def strip_markdown(md: str) -> str:
    """Remove Markdown/HTML syntax that carries no words (see the module docstring)."""
    for pattern, repl in _MD_STRIP:
        md = pattern.sub(repl, md)
    return md


def levenshtein(a: list[str], b: list[str]) -> int:
    """Token-level edit distance (numpy, one row at a time)."""
    if not a or not b:
        return max(len(a), len(b))
    vocab: dict[str, int] = {}
    xa = np.array([vocab.setdefault(t, len(vocab)) for t in a], dtype=np.int64)
    xb = np.array([vocab.setdefault(t, len(vocab)) for t in b], dtype=np.int64)
    return edit_distance(xa, xb)


def recall(gt: list[str], got: list[str]) -> float:
    """Multiset recall of ``gt`` tokens in ``got``."""
    if not gt:
        return 1.0
    have = Counter(got)
    return sum(min(n, have[t]) for t, n in Counter(gt).items()) / len(gt)


def order_score(gt: list[str], got: list[str]) -> float:
    """``1 - levenshtein / max_len`` over the first ``ORDER_CAP`` tokens."""
    a, b = gt[:ORDER_CAP], got[:ORDER_CAP]
    if not a and not b:
        return 1.0
    return 1.0 - levenshtein(a, b) / max(len(a), len(b))


def run_parse(path: Path) -> tuple[ParseResult | None, str, float]:
    """Parse one file; return the result (or None), an error string and the seconds taken."""
    data = path.read_bytes()
    t0 = time.perf_counter()
    try:
        res = parse(data, detect_mime(data, path.name), filename=path.name)
        return res, "", time.perf_counter() - t0
    except RagsyncError as exc:
        return None, f"{exc.error_class}: {str(exc)[:120]}", time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - report, keep evaluating
        return None, f"internal {type(exc).__name__}: {str(exc)[:120]}", time.perf_counter() - t0


def full_text(res: ParseResult) -> str:
    """The parsed document as one string."""
    return "\n".join(e.text for e in res.elements)


def _norm_cell(text: str) -> str:
    return " ".join(text.replace("\\|", "|").split()).lower()


def markdown_cells(res: ParseResult) -> list[str]:
    """Cells of every parsed table element (separator rows dropped)."""
    cells: list[str] = []
    for e in res.elements:
        if e.type != ElementType.TABLE:
            continue
        for line in e.text.splitlines():
            line = line.strip()
            if not line or re.fullmatch(r"\|?[\s:|-]+\|?", line) and "-" in line:
                continue
            if line.startswith("|"):
                line = line[1:]
            if line.endswith("|") and not line.endswith("\\|"):
                line = line[:-1]
            cells += [_norm_cell(c) for c in re.split(r"(?<!\\)\|", line)]
    return [c for c in cells if c]


def cell_scores(expected: list[str], res: ParseResult) -> dict[str, float]:
    """Strict (inside parsed tables, multiset) and lenient (anywhere in the text) cell recall."""
    exp = [c for c in (_norm_cell(x) for x in expected) if c]
    if not exp:
        return {}
    pool = Counter(markdown_cells(res))
    strict = 0
    for c in exp:
        if pool[c] > 0:
            pool[c] -= 1
            strict += 1
    text = " ".join(full_text(res).replace("\\|", "|").split()).lower()
    lenient = sum(1 for c in exp if c in text)
    tables = sum(1 for e in res.elements if e.type == ElementType.TABLE)
    return {"cells": len(exp), "strict": strict / len(exp), "lenient": lenient / len(exp), "tables": tables}


def load_index(corpus: Path) -> list[dict[str, str]]:
    """Rows of ``GROUND_TRUTH_INDEX.tsv``."""
    with (corpus / "GROUND_TRUTH_INDEX.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


# --------------------------------------------------------------------------- metrics


def eval_text(corpus: Path, index: list[dict[str, str]], per_format: int) -> list[Row]:
    """Recall and order against docling Markdown snapshots (one ground truth per input)."""
    chosen: dict[str, dict[str, str]] = {}
    for r in index:
        if not r["ground_truth"].endswith(".md") or not r["input"].startswith("documents/docling/"):
            continue
        old = chosen.get(r["input"])
        # OCR inputs have one snapshot per engine: prefer Tesseract full-page (the engine we run)
        if old is None or (
            "tesseract/full_page" in r["ground_truth"] and "tesseract/full" not in old["ground_truth"]
        ):
            chosen[r["input"]] = r
    for r in index:
        if r["input"] == "documents/pdfplumber/scotus-transcript-p1.pdf":
            chosen[r["input"]] = r
    by_group: dict[str, list[dict[str, str]]] = defaultdict(list)
    for inp, r in sorted(chosen.items()):
        group = inp.split("/")[2] if inp.startswith("documents/docling/") else "pdf (pdfplumber)"
        by_group[group].append(r)
    rows: list[Row] = []
    for group, items in sorted(by_group.items()):
        for r in items[:per_format]:
            row = Row("text", group, r["input"], r["nature"])
            res, err, secs = run_parse(corpus / r["input"])
            row.seconds = round(secs, 3)
            gt = tokens(
                strip_markdown((corpus / r["ground_truth"]).read_text(encoding="utf-8", errors="replace"))
            )
            if res is None:
                row.error = err
                row.scores = {"recall": 0.0, "order": 0.0, "gt_tokens": len(gt)}
            else:
                got = tokens(full_text(res))
                row.scores = {"recall": recall(gt, got), "order": order_score(gt, got), "gt_tokens": len(gt)}
            rows.append(row)
    return rows


def _csv_cells(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [cell for line in csv.reader(io.StringIO(text)) for cell in line]


def _json_cells(path: Path) -> list[str]:
    out: list[str] = []
    for table in json.loads(path.read_text(encoding="utf-8")):
        for row in table.get("data", []):
            out += [c.get("text", "") for c in row]
    return out


def _assert_strings(path: Path) -> list[str]:
    """String constants compared with ``==`` to a subscript: ``table[0][0] == "x"``, ``row == [..]``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript):
            for comp in node.comparators:
                consts = [comp] if isinstance(comp, ast.Constant) else getattr(comp, "elts", [])
                out += [c.value for c in consts if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return out


def eval_tables(corpus: Path, index: list[dict[str, str]], per_format: int) -> list[Row]:
    """Cell accuracy for tabula snapshots, pdfplumber assertions and PubTabNet images."""
    rows: list[Row] = []
    seen: set[str] = set()
    tabula = [r for r in index if r["ground_truth"].startswith("parse_groundtruth/tabula-java/")]
    tabula.sort(key=lambda r: (r["input"], not r["ground_truth"].endswith(".csv")))
    picked = []
    for r in tabula:
        if r["input"] not in seen:
            seen.add(r["input"])
            picked.append(r)
    plumber = {
        "documents/pdfplumber/nics-background-checks-2015-11.pdf": "test_nics_report.py",
        "documents/pdfplumber/WARN-Report-for-7-1-2015-to-03-25-2016.pdf": "test_ca_warn_report.py",
    }
    natures = {r["input"]: r["nature"] for r in index}
    jobs: list[tuple[str, str, list[str], str]] = []
    for r in picked[:per_format]:
        gt = corpus / r["ground_truth"]
        cells = _csv_cells(gt) if gt.suffix == ".csv" else _json_cells(gt)
        jobs.append(("pdf (tabula)", r["input"], cells, r["nature"]))
    for inp, test in plumber.items():
        cells = _assert_strings(corpus / "parse_groundtruth" / "pdfplumber" / test)
        jobs.append(
            ("pdf (pdfplumber asserts)", inp, cells, natures.get(inp, "maintainer-written assertions"))
        )
    ptn = corpus / "parse_groundtruth" / "pubtabnet" / "examples"
    lines = (ptn / "PubTabNet_Examples.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines[: min(per_format, 10)]:
        rec = json.loads(line)
        cells = [
            "".join(t for t in c["tokens"] if not re.fullmatch(r"</?\w+>", t)) for c in rec["html"]["cells"]
        ]
        inp = f"parse_groundtruth/pubtabnet/examples/{rec['filename']}"
        jobs.append(
            ("png (PubTabNet, OCR)", inp, cells, natures.get(inp, "human-verified dataset annotation"))
        )
    for group, inp, cells, nature in jobs:
        row = Row("tables", group, inp, nature)
        res, err, secs = run_parse(corpus / inp)
        row.seconds = round(secs, 3)
        if res is None:
            row.error = err
            row.scores = {"cells": len([c for c in cells if c.strip()]), "strict": 0.0, "lenient": 0.0}
        else:
            row.scores = cell_scores(cells, res)
        rows.append(row)
    return rows


def eval_ocr(corpus: Path, index: list[dict[str, str]], per_format: int) -> list[Row]:
    """CER of ``parse`` on the tesseract-test images that have a transcription."""
    folder = corpus / "ocr_groundtruth" / "tesseract-test"
    natures = {r["input"]: r["nature"] for r in index}
    default_nature = "human GT (UNLV-ISRI for *.3B; tesseract maintainers for others)"
    rows: list[Row] = []
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".tif", ".tiff", ".png", ".jpg"))
    for img in images[:per_format]:
        stem = img.stem.split("-rotated")[0]
        ref_path = next(
            (folder / n for n in (f"{stem}.gold.txt", f"{stem}.txt") if (folder / n).exists()),
            None,
        )
        if ref_path is None:
            continue
        rel = str(img.relative_to(corpus))
        nature = natures.get(rel, default_nature)
        if "rotated" in img.name:
            nature += " (same page, rotated copy)"
        row = Row("ocr", img.suffix.lower().lstrip("."), rel, nature)
        res, err, secs = run_parse(img)
        row.seconds = round(secs, 3)
        ref = re.sub(r"(\w)-\n(\w)", r"\1\2", ref_path.read_text(encoding="utf-8", errors="replace"))
        if res is None:
            row.error = err
            row.scores = {"cer": 1.0, "ref_chars": len(ref)}
        else:
            row.scores = {
                "cer": char_error_rate(full_text(res), ref),
                "ref_chars": len(ref),
                "confidence": res.ocr_confidence or 0.0,
                "review_pages": len(res.pages_for_review),
            }
        rows.append(row)
    return rows


def eval_order(corpus: Path, index: list[dict[str, str]], per_format: int) -> list[Row]:
    """Reading order on two-column PDFs."""
    import pypdfium2 as pdfium

    rows: list[Row] = []
    gts = {r["input"]: r for r in index if r["ground_truth"].endswith(".md")}
    for inp in TWO_COLUMN:
        r = gts.get(inp)
        if r is None or not (corpus / inp).exists():
            continue
        row = Row("order", "pdf (docling snapshot)", inp, r["nature"])
        res, err, secs = run_parse(corpus / inp)
        row.seconds = round(secs, 3)
        gt = tokens(strip_markdown((corpus / r["ground_truth"]).read_text(encoding="utf-8")))
        got = tokens(full_text(res)) if res else []
        row.error = err
        row.scores = {"order": order_score(gt, got), "recall": recall(gt, got), "gt_tokens": len(gt)}
        rows.append(row)
    path = corpus / TRACEMONKEY
    if path.exists():
        data = path.read_bytes()
        doc = pdfium.PdfDocument(data)
        ref_pages = []
        for i in range(len(doc)):
            page = doc[i]
            tp = page.get_textpage()
            ref_pages.append(tp.get_text_range())
            tp.close()
            page.close()
        doc.close()
        res, err, secs = run_parse(path)
        proxy = "no ground truth: proxy = PDFium content-stream text order (LaTeX columns in order)"
        row = Row("order", "pdf (proxy)", TRACEMONKEY, proxy, seconds=round(secs, 3), error=err)
        gt = tokens("\n".join(ref_pages))
        got = tokens(full_text(res)) if res else []
        row.scores = {"order": order_score(gt, got), "recall": recall(gt, got), "gt_tokens": len(gt)}
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- report


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def render(rows: list[Row]) -> str:
    """One Markdown table per metric (per group means) plus the per-input detail."""
    out: list[str] = []
    spec = {
        "text": ("Text recall and order vs Markdown snapshots", ["recall", "order"]),
        "tables": ("Table cell accuracy", ["strict", "lenient"]),
        "ocr": ("OCR character error rate (lower is better)", ["cer", "confidence"]),
        "order": ("Reading order on two-column PDFs", ["order", "recall"]),
    }
    for metric, (title, keys) in spec.items():
        mrows = [r for r in rows if r.metric == metric]
        if not mrows:
            continue
        out += [f"### {title}", "", "| format | n | errors | " + " | ".join(f"mean {k}" for k in keys)]
        out[-1] += " | ground truth nature |"
        out.append("|---|---:|---:|" + "---:|" * len(keys) + "---|")
        groups: dict[str, list[Row]] = defaultdict(list)
        for r in mrows:
            groups[r.group].append(r)
        for group, rs in groups.items():
            natures = "; ".join(sorted({r.nature for r in rs}))
            vals = " | ".join(f"{_mean([r.scores.get(k, 0.0) for r in rs]):.3f}" for k in keys)
            out.append(f"| {group} | {len(rs)} | {sum(1 for r in rs if r.error)} | {vals} | {natures} |")
        out += [
            "",
            "<details><summary>per input</summary>",
            "",
            "| input | " + " | ".join(keys) + " | s | error |",
        ]
        out.append("|---|" + "---:|" * len(keys) + "---:|---|")
        for r in mrows:
            vals = " | ".join(f"{r.scores.get(k, 0.0):.3f}" for k in keys)
            out.append(f"| {r.input} | {vals} | {r.seconds:.2f} | {r.error} |")
        out += ["", "</details>", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--max-per-format", type=int, default=40, help="inputs per format/group (default 40)")
    ap.add_argument("--only", nargs="+", choices=METRICS, default=list(METRICS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    corpus = args.corpus.resolve()
    if not (corpus / "GROUND_TRUTH_INDEX.tsv").exists():
        sys.exit(
            f"shared corpus not found at {corpus}: eval_parse needs ../shared/corpus next to the project"
        )
    index = load_index(corpus)
    t0 = time.perf_counter()
    rows: list[Row] = []
    funcs = {"text": eval_text, "tables": eval_tables, "ocr": eval_ocr, "order": eval_order}
    for metric in args.only:
        rows += funcs[metric](corpus, index, args.max_per_format)
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"elapsed_s": round(elapsed, 1), "rows": [asdict(r) for r in rows]}, indent=2))
    else:
        print(render(rows))
        print(f"\n{len(rows)} inputs scored in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
