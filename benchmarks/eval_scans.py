"""Scans that generalize: ragsync's OCR path against raw Tesseract on 200+
page images rendered from the corpus's text-layer PDFs, plus every
transcribed scan, per layout class, on a TUNE and a REPORT set.

Pages. ``DOCUMENTS`` names text-layer PDFs of the corpus by layout class
(``multi-column`` papers, ``tables`` (government and report tables),
``forms``, ``slides``, ``filings`` (transcripts, manuals, regulations),
``letters`` (memos, minutes, one-column prose)); up to the class's number of
pages of each (pages with 25 or more words in the text layer, evenly spread)
are rendered with ``pdftoppm`` at 100-300 dpi and made realistic
(``degrade``, seeded by the page's name): blur, a skew of up to a degree,
speckle, uneven light, JPEG; written as gray PNG, JPEG, RGBA PNG or an
image-only PDF (a scanned filing). The transcribed scans are
``eval_second_ocr.PAGES``' first thirteen (tesseract-test, docling's
``ocr_test`` and its turns, the WebP page): class ``transcribed``.

Truth. The text layer, ``pdftotext -f P -l P``: in reading order (poppler's
flow: column by column) for prose classes, ``-layout`` (row by row) for
``tables`` and ``forms``, where a reader reads across. The transcriptions for
the transcribed scans.

Sets. Documents are split by ``split_of`` (a hash of the document's group,
alternating within its class), so no document (nor two copies of one
paper) is in both TUNE and REPORT; a transcribed scan and its turns are one
group.

Per page, in the same run: raw ``tesseract IMAGE stdout`` (one process,
``OMP_THREAD_LIMIT=1``) and ``python -m cli.main parse --json FILE`` (what a
user runs: process start, detection, the OCR path), each timed by the CPU
seconds ``wait4`` reports for it (its children included). Per class and
set: CER (``char_error_rate`` after NFKC, typographic quotes and dashes
folded, Markdown table markup removed from both), word recall, tables
emitted on pages of prose classes, pages dropped (no element, or an error;
``dropped_readable``: of those, pages raw Tesseract read 80 % of the words
of), pages per CPU-second of both, and for multi-column pages the reading
order (``order_score``: truth lines of four or more words found in the
output in their order, as a share of the truth lines).

Usage::

    python benchmarks/eval_scans.py --set tune [--classes multi-column,slides] [--limit 20] [--json]

The pages are built once in ``--work`` (default: a folder in the temporary
directory) and reused; results of each run go to stdout (``--json``) and to
``--work/LABEL.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ocr import DEFAULT_CORPUS  # noqa: E402

from ragsync.parsing.ocr_quality import char_error_rate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_U = "documents/unstructured"
_P = "documents/pdfplumber"
_D = "documents/docling"
# (class, pages per document, [(document, group)]): the group keeps copies of one paper in one set.
DOCUMENTS: list[tuple[str, int, list[tuple[str, str]]]] = [
    (
        "multi-column",
        8,
        [
            ("documents/pdfjs/tracemonkey.pdf", "tracemonkey"),
            (f"{_U}/pdf/multi-column.pdf", "dpr"),
            (f"{_U}/pdf/multi-column-2p.pdf", "dpr"),
            (f"{_P}/federal-register-2020-17221.pdf", "fedreg"),
            (f"{_U}/pdf/a1977-backus-p21.pdf", "backus"),
            (f"{_D}/pdf/sources/2305.03393v1-pg9.pdf", "2305"),
            (f"{_D}/pdf/sources/amt_handbook_sample.pdf", "amt"),
            (f"{_P}/issue-982-example.pdf", "982"),
            (f"{_U}/pdf/list-item-example.pdf", "list-item"),
            (f"{_U}/language-docs/fr_olap.pdf", "olap"),
        ],
    ),
    (
        "tables",
        6,
        [
            (f"{_P}/WARN-Report-for-7-1-2015-to-03-25-2016.pdf", "warn"),
            (f"{_P}/nics-background-checks-2015-11.pdf", "nics"),
            (f"{_P}/senate-expenditures.pdf", "senate"),
            (f"{_P}/la-precinct-bulletin-2014-p1.pdf", "precinct"),
            (f"{_P}/issue-90-example.pdf", "90"),
            (f"{_P}/issue-192-example.pdf", "192"),
            (f"{_P}/issue-461-example.pdf", "461"),
            (f"{_P}/table-curves-example.pdf", "curves"),
            (f"{_P}/issue-53-example.pdf", "53"),
            (f"{_P}/issue-33-lorem-ipsum.pdf", "33"),
            (f"{_P}/issue-912.pdf", "912"),
            (f"{_P}/chelsea_pdta.pdf", "chelsea"),
            (f"{_D}/odf/sources/text_document_02.odt.pdf", "odt02"),
            (f"{_D}/odf/sources/text_document_03.odt.pdf", "odt03"),
            (f"{_U}/pdf/embedded-images-tables.pdf", "emb-tables"),
            (f"{_U}/pdf/layout-parser-paper-with-table.pdf", "layout-parser"),
        ],
    ),
    (
        "forms",
        4,
        [
            (f"{_P}/150109DSP-Milw-505-90D.pdf", "dsp-milw"),
            (f"{_P}/issue-13-151201DSP-Fond-581-90D.pdf", "dsp-fond"),
            (f"{_P}/pr-138-example.pdf", "pr138"),
            (f"{_P}/issue-140-example.pdf", "140"),
            (f"{_P}/pdffill-demo.pdf", "pdffill"),
            ("documents/tika/testPDF_XFA_govdocs1_258578.pdf", "xfa"),
            ("documents/pdfjs/bigboundingbox.pdf", "invoice"),
            ("documents/tika/testPDFVarious.pdf", "various"),
            (f"{_P}/issue-466-example.pdf", "466"),
        ],
    ),
    (
        "slides",
        3,
        [
            (f"{_D}/odf/sources/odf_presentation_01.odp.pdf", "odp"),
            (f"{_U}/pdf/pdf-bad-color-space.pdf", "ambition"),
            (f"{_U}/pdf/embedded-images.pdf", "emb-images"),
            (f"{_U}/pdf/chevron-page.pdf", "chevron"),
            ("documents/pdfjs/bug946506.pdf", "946506"),
            ("documents/pdfjs/issue8702.pdf", "8702"),
            (f"{_U}/pdf/reliance.pdf", "reliance"),
            (f"{_U}/pdf/invalid-pdf-structure-pdfminer-one-page.pdf", "gao"),
        ],
    ),
    (
        "filings",
        8,
        [
            (f"{_P}/scotus-transcript-p1.pdf", "scotus"),
            (f"{_U}/pdf/pdf2image-memory-error-test-400p.pdf", "irs-manual"),
            ("documents/tika/testPDF_childAttachments.pdf", "irs-pub15"),
            (f"{_U}/pdf/DA-619p.pdf", "da"),
            (f"{_P}/issue-316-example.pdf", "316"),
            ("documents/tika/testPDF-TIKA-4444.pdf", "4444"),
            (f"{_U}/pdf/interface-config-guide-p93.pdf", "interface"),
            (f"{_D}/pdf/sources/redp5110_sampled.pdf", "redp"),
        ],
    ),
    (
        "letters",
        6,
        [
            (f"{_U}/pdf/fake-memo-with-duplicate-page.pdf", "memo"),
            ("documents/tika/testPDF_protected.pdf", "speech"),
            (f"{_P}/cupertino_usd_4-6-16.pdf", "cupertino"),
            (f"{_D}/odf/sources/text_document_01.odt.pdf", "odt01"),
            (f"{_P}/2023-06-20-PV.pdf", "pv"),
            (f"{_P}/issue-598-example.pdf", "598"),
            (f"{_D}/pdf/sources/multi_page.pdf", "multi-page"),
            ("documents/pdfjs/TAMReview.pdf", "tam"),
            (f"{_U}/pdf/layout-parser-paper-fast.pdf", "layout-parser"),
            (f"{_P}/issue-848.pdf", "848"),
            ("documents/tika/testPDF.pdf", "tika-pdf"),
            (f"{_D}/pdf/sources/code_and_formula.pdf", "code"),
            (f"{_D}/pdf/sources/picture_classification.pdf", "picture"),
            (f"{_U}/pdf/DA-1p.pdf", "da"),
            (f"{_U}/pdf/failure-after-repair.pdf", "booklet"),
        ],
    ),
]
# Classes of prose: a table emitted on one of their pages is a false table.
PROSE_CLASSES = ("multi-column", "slides", "filings", "letters", "transcribed")
# Classes read across (truth from ``pdftotext -layout``).
ROW_CLASSES = ("tables", "forms")
MIN_PAGE_WORDS = 25
# A page raw Tesseract reads this share of the words of must not be dropped.
READABLE = 0.8


@dataclass(frozen=True)
class Page:
    """One page of the validation.

    Attributes:
        key: unique name (``group/document#page``).
        cls: layout class.
        group: the document group (the split's unit).
        split: ``tune`` or ``report``.
        image: the image file raw Tesseract reads.
        parse_input: the file ragsync parses (the image, or an image-only PDF).
        truth: the truth text file.
        order_truth: the reading-order truth file (multi-column pages), or ``""``.
    """

    key: str
    cls: str
    group: str
    split: str
    image: str
    parse_input: str
    truth: str
    order_truth: str = ""


def split_of(groups_by_class: dict[str, list[str]]) -> dict[str, str]:
    """The set of each group (pure, deterministic): the groups of each class
    not placed by an earlier class, sorted by the SHA-1 of their name, go
    alternately to ``tune`` and ``report``. A group is in one set whatever
    classes its pages are in."""
    out: dict[str, str] = {}
    for cls, groups in groups_by_class.items():
        fresh = [g for g in dict.fromkeys(groups) if g not in out]
        ordered = sorted(fresh, key=lambda g: hashlib.sha1(f"{cls}/{g}".encode()).hexdigest())
        for i, group in enumerate(ordered):
            out[group] = "tune" if i % 2 == 0 else "report"
    return out


def sample(pages: list[Page], per_class: int) -> list[Page]:
    """At most ``per_class`` pages of each class in each set, taken in turn
    from its document groups (their first pages first) (pure)."""
    out: list[Page] = []
    for key in dict.fromkeys((p.split, p.cls) for p in pages):
        groups: dict[str, list[Page]] = {}
        for p in pages:
            if (p.split, p.cls) == key:
                groups.setdefault(p.group, []).append(p)
        turns = [
            g[i] for i in range(max(len(g) for g in groups.values())) for g in groups.values() if i < len(g)
        ]
        out.extend(turns[:per_class])
    return out


def _pdftotext(pdf: Path, page: int, layout: bool) -> str:
    cmd = ["pdftotext", "-f", str(page), "-l", str(page), "-enc", "UTF-8"]
    cmd += ["-layout"] if layout else []
    out = subprocess.run([*cmd, str(pdf), "-"], capture_output=True, timeout=60, check=False)
    return out.stdout.decode("utf-8", "replace").replace("\f", "")


def _page_count(pdf: Path) -> int:
    out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, timeout=60, check=False)
    found = re.search(rb"^Pages:\s+(\d+)", out.stdout, re.M)
    return int(found.group(1)) if found else 0


def pick_pages(pdf: Path, limit: int) -> list[int]:
    """Up to ``limit`` pages of ``pdf`` with ``MIN_PAGE_WORDS`` or more words
    in the text layer, evenly spread over the document (the first 40 looked at)."""
    pages = [
        p
        for p in range(1, min(_page_count(pdf), 40) + 1)
        if len(_pdftotext(pdf, p, False).split()) >= MIN_PAGE_WORDS
    ]
    if len(pages) <= limit:
        return pages
    return [pages[round(i * (len(pages) - 1) / max(limit - 1, 1))] for i in range(limit)]


def degrade(gray: np.ndarray, dpi: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    """A rendered page as a realistic scan: blur (sigma up to 0.9 px at
    300 dpi, scaled with ``dpi``), a skew of up to one degree, speckle on a
    third of the pages (0.2-1 % of the pixels), uneven light on a third
    (from 65-85 % at one corner), returned with what was done (JPEG is the
    writer's, ``write_page``)."""
    import cv2

    done: dict[str, Any] = {"dpi": dpi}
    img = gray.astype(np.float32)
    sigma = float(rng.uniform(0.2, 0.9)) * dpi / 300
    img = cv2.GaussianBlur(img, (0, 0), sigma)
    done["blur"] = round(sigma, 2)
    angle = float(rng.uniform(-1.0, 1.0))
    h, w = img.shape
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    img = cv2.warpAffine(img, matrix, (w, h), flags=cv2.INTER_LINEAR, borderValue=255.0)
    done["skew"] = round(angle, 2)
    if rng.random() < 1 / 3:
        lo = float(rng.uniform(0.65, 0.85))
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        light = lo + (1 - lo) * (0.5 * xx / w + 0.5 * yy / h)
        img = img * (light if rng.random() < 0.5 else light[::-1, ::-1])
        done["light"] = round(lo, 2)
    img = np.clip(img, 0, 255).astype(np.uint8)
    if rng.random() < 1 / 3:
        share = float(rng.uniform(0.002, 0.01))
        noise = rng.random(img.shape)
        img[noise < share / 2] = 0
        img[noise > 1 - share / 2] = 255
        done["speckle"] = round(share, 4)
    return img, done


def write_page(gray: np.ndarray, dpi: int, stem: Path, rng: np.random.Generator) -> tuple[Path, Path, str]:
    """Write a degraded page: JPEG (quality 40-90) for half the pages, gray
    PNG, RGBA PNG (a tinted, opaque screenshot) or an image-only PDF for the
    rest. Returns the image raw Tesseract reads, the file ragsync parses
    and the format's name."""
    from PIL import Image

    draw = rng.random()
    if draw < 0.5:
        path = stem.with_suffix(".jpg")
        Image.fromarray(gray).save(path, quality=int(rng.uniform(40, 90)), dpi=(dpi, dpi))
        return path, path, "jpeg"
    if draw < 0.7:
        path = stem.with_suffix(".png")
        Image.fromarray(gray).save(path, dpi=(dpi, dpi))
        return path, path, "png"
    if draw < 0.85:
        path = stem.with_suffix(".png")
        rgba = np.stack(
            [
                gray,
                gray,
                np.clip(gray.astype(np.int16) - 12, 0, 255).astype(np.uint8),
                np.full_like(gray, 255),
            ],
            axis=-1,
        )
        Image.fromarray(rgba, "RGBA").save(path, dpi=(dpi, dpi))
        return path, path, "rgba"
    path = stem.with_suffix(".png")
    Image.fromarray(gray).save(path, dpi=(dpi, dpi))
    pdf = stem.with_suffix(".pdf")
    Image.fromarray(gray).save(pdf, resolution=float(dpi))
    return path, pdf, "pdf"


def _transcribed(corpus: Path) -> list[tuple[str, str, str]]:
    """The transcribed scans: (group, file under the corpus, truth file)."""
    from eval_second_ocr import PAGES

    out = []
    for _, image, truth in PAGES[:13]:
        name = Path(image).name
        group = "phototest" if name.startswith("phototest") else ("ocr_test" if "ocr_test" in name else name)
        out.append((group, image, truth))
    return out


def build(corpus: Path, work: Path) -> list[Page]:
    """Render, degrade and write every page once (kept in ``work``); the pages' list."""
    groups: dict[str, list[str]] = {cls: [g for _, g in docs] for cls, _, docs in DOCUMENTS}
    groups["transcribed"] = [g for g, _, _ in _transcribed(corpus)]
    sets = split_of(groups)
    index = work / "pages.json"
    if index.is_file():
        return [Page(**p) for p in json.loads(index.read_text())]
    work.mkdir(parents=True, exist_ok=True)
    pages: list[Page] = []
    for cls, limit, docs in DOCUMENTS:
        for rel, group in docs:
            pdf = corpus / rel
            if not pdf.is_file():
                print(f"missing {rel}: skipped", file=sys.stderr)
                continue
            for number in pick_pages(pdf, limit):
                pages.append(_build_page(pdf, number, cls, group, sets[group], work))
                print(f"built {pages[-1].key} ({cls}, {pages[-1].split})", file=sys.stderr)
    for group, image, truth in _transcribed(corpus):
        pages.append(_build_transcribed(corpus, image, truth, group, sets[group], work))
    index.write_text(json.dumps([p.__dict__ for p in pages], indent=1))
    return pages


def _build_page(pdf: Path, number: int, cls: str, group: str, split: str, work: Path) -> Page:
    from PIL import Image

    key = f"{group}/{pdf.stem}#{number}"
    seed = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng(seed)
    dpi = int(rng.choice([100, 150, 200, 300], p=[0.15, 0.3, 0.3, 0.25]))
    stem = work / re.sub(r"[^\w-]+", "_", key)
    how = stem.with_suffix(".how.json")
    if how.is_file():  # built by an earlier run
        kind = json.loads(how.read_text())["format"]
        image = stem.with_suffix({"jpeg": ".jpg"}.get(kind, ".png"))
        parse_input = stem.with_suffix(".pdf") if kind == "pdf" else image
        order = str(stem.with_suffix(".order.txt")) if cls == "multi-column" else ""
        return Page(
            key, cls, group, split, str(image), str(parse_input), str(stem.with_suffix(".truth.txt")), order
        )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "page"
        subprocess.run(
            [
                "pdftoppm",
                "-r",
                str(dpi),
                "-f",
                str(number),
                "-l",
                str(number),
                "-gray",
                "-png",
                "-singlefile",
                str(pdf),
                str(out),
            ],
            check=True,
            timeout=300,
        )
        gray = np.asarray(Image.open(out.with_suffix(".png")).convert("L"))
    degraded, done = degrade(gray, dpi, rng)
    image, parse_input, kind = write_page(degraded, dpi, stem, rng)
    truth = stem.with_suffix(".truth.txt")
    truth.write_text(_pdftotext(pdf, number, cls in ROW_CLASSES), encoding="utf-8")
    order = ""
    if cls == "multi-column":
        order_path = stem.with_suffix(".order.txt")
        order_path.write_text(_pdftotext(pdf, number, False), encoding="utf-8")
        order = str(order_path)
    stem.with_suffix(".how.json").write_text(json.dumps({**done, "format": kind}))
    return Page(key, cls, group, split, str(image), str(parse_input), str(truth), order)


def _build_transcribed(corpus: Path, image: str, truth: str, group: str, split: str, work: Path) -> Page:
    source = corpus / image
    stem = work / re.sub(r"[^\w-]+", "_", f"transcribed/{source.name}")
    raw_image = source
    if source.suffix.lower() == ".pdf":  # raw Tesseract reads the page as ragsync renders it (300 dpi)
        subprocess.run(
            [
                "pdftoppm",
                "-r",
                "300",
                "-f",
                "1",
                "-l",
                "1",
                "-gray",
                "-png",
                "-singlefile",
                str(source),
                str(stem),
            ],
            check=True,
            timeout=300,
        )
        raw_image = stem.with_suffix(".png")
    text = (corpus / truth).read_text(encoding="utf-8").replace("-\n", "")
    truth_path = stem.with_suffix(".truth.txt")
    truth_path.write_text(text, encoding="utf-8")
    return Page(
        f"{group}/{source.name}", "transcribed", group, split, str(raw_image), str(source), str(truth_path)
    )


# --------------------------------------------------------------------------- running


def run_timed(
    cmd: list[str], env: dict[str, str], timeout_s: float = 900, cwd: Path = REPO
) -> tuple[str, float, float]:
    """Run ``cmd`` in ``cwd``; its stdout, CPU seconds (``wait4``: it and its children) and wall seconds."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, cwd=cwd
        )
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            _, _, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = 0  # reaped by wait4
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return text, usage.ru_utime + usage.ru_stime, time.monotonic() - started


def _env(repo: Path = REPO) -> dict[str, str]:
    return {**os.environ, "OMP_THREAD_LIMIT": "1", "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"}


def strip_tables(markdown: str) -> str:
    """A Markdown table's text without its markup: the separator row goes,
    cell bars become spaces (escaped bars stay as bars)."""
    lines = [li for li in markdown.splitlines() if not re.fullmatch(r"\s*\|?(\s*:?-{3,}:?\s*\|)+\s*", li)]
    return "\n".join(re.sub(r"(?<!\\)\|", " ", li).replace("\\|", "|") for li in lines)


_FOLD = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": "-", "\u2013": "-", "\u00ad": ""}
)


def normal(text: str) -> str:
    """Text as compared: NFKC (ligatures, full-width forms), quotes and
    dashes folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_FOLD).split())


def tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", normal(text).lower())


def recall(truth: list[str], got: list[str]) -> float:
    have = Counter(got)
    return sum(min(n, have[t]) for t, n in Counter(truth).items()) / max(len(truth), 1)


def order_score(order_truth: str, text: str) -> float:
    """Reading order: of the truth's lines of four or more words (column
    order), the share found in ``text`` (by their first four words) in the
    truth's order (the longest increasing run of their positions)."""
    import bisect

    got = tokens(text)
    at: dict[tuple[str, ...], int] = {}
    for i in range(len(got) - 3):
        at.setdefault(tuple(got[i : i + 4]), i)
    anchors = [tuple(t[:4]) for t in (tokens(li) for li in order_truth.splitlines()) if len(t) >= 4]
    positions = [at[a] for a in anchors if a in at]
    tails: list[int] = []
    for p in positions:
        k = bisect.bisect_left(tails, p)
        tails[k : k + 1] = [p]
    return len(tails) / max(len(anchors), 1)


def _ragsync_text(out: str) -> tuple[str, int, str, list[int], float | None, list[list[Any]]]:
    """From ``parse --json``'s output: the text (tables' markup removed), the
    number of tables, the error class (``""``), the pages for review, the
    OCR confidence and the elements (``[type, text, confidence]``)."""
    try:
        data = json.loads(out)
    except ValueError:
        return "", 0, "no-json", [], None, []
    parts, tables = [], 0
    for e in data.get("elements", []):
        if e["type"] == "table":
            tables += 1
            parts.append(strip_tables(e["text"]))
        else:
            parts.append(e["text"])
    error = (data.get("error") or {}).get("class", "")
    elements = [[e["type"], e["text"], e.get("confidence")] for e in data.get("elements", [])]
    return (
        "\n".join(parts),
        tables,
        error,
        data.get("pages_for_review", []),
        data.get("ocr_confidence"),
        elements,
    )


def ragsync_figures(page: Page, repo: Path, truth: str) -> dict[str, Any]:
    """``parse --json`` of the page's file by the checkout ``repo``: its figures (``score_page``)."""
    out, cpu, wall = run_timed(
        [sys.executable, "-m", "cli.main", "parse", "--json", page.parse_input], _env(repo), cwd=repo
    )
    text, tables, error, review, confidence, elements = _ragsync_text(out)
    row: dict[str, Any] = {
        "cer": round(char_error_rate(normal(text), normal(truth)), 4),
        "recall": round(recall(tokens(truth), tokens(text)), 4),
        "tables": tables,
        "error": error,
        "review": review,
        "confidence": None if confidence is None else round(confidence, 1),
        "dropped": not text.strip(),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "elements": elements,
    }
    if page.order_truth:
        row["order"] = round(order_score(Path(page.order_truth).read_text(encoding="utf-8"), text), 4)
    return row


def score_page(
    page: Page, reuse: dict[str, dict[str, Any]] | None = None, repo: Path = REPO, before: Path | None = None
) -> dict[str, Any]:
    """Run raw Tesseract (or reuse its recorded run), ragsync (the checkout
    ``repo``) and, when given, the checkout ``before`` on one page; its
    figures (``before``'s under the key ``before``)."""
    truth = Path(page.truth).read_text(encoding="utf-8")
    old = (reuse or {}).get(page.key)
    if old is not None:
        raw, raw_cpu, raw_wall = old["raw_text"], old["raw_cpu_s"], old["raw_wall_s"]
    else:
        raw, raw_cpu, raw_wall = run_timed(["tesseract", page.image, "stdout"], _env(repo))
    row: dict[str, Any] = {
        "key": page.key,
        "class": page.cls,
        "split": page.split,
        "format": Path(page.parse_input).suffix.lstrip("."),
        "raw_cer": round(char_error_rate(normal(raw), normal(truth)), 4),
        "raw_recall": round(recall(tokens(truth), tokens(raw)), 4),
        "raw_cpu_s": round(raw_cpu, 3),
        "raw_wall_s": round(raw_wall, 3),
        "raw_text": raw,
    }
    if page.order_truth:
        row["raw_order"] = round(order_score(Path(page.order_truth).read_text(encoding="utf-8"), raw), 4)
    row.update(ragsync_figures(page, repo, truth))
    if before is not None:
        row["before"] = ragsync_figures(page, before, truth)
    return row


def figures(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One class's figures for rows of one ragsync checkout (``score_page``'s
    keys; raw Tesseract's ``raw_*`` beside them)."""

    def mean(key: str) -> float | None:
        values = [r[key] for r in items if key in r]
        return round(float(np.mean(values)), 4) if values else None

    raw_cpu = sum(r["raw_cpu_s"] for r in items)
    cpu = sum(r["cpu_s"] for r in items)
    prose = [r for r in items if r["class"] in PROSE_CLASSES]
    raw_cer, cer = mean("raw_cer") or 0.0, mean("cer") or 0.0
    return {
        "pages": len(items),
        "raw_cer": raw_cer,
        "cer": cer,
        "cer_vs_raw": round(cer / max(raw_cer, 1e-9), 3),
        "raw_recall": mean("raw_recall"),
        "recall": mean("recall"),
        "raw_order": mean("raw_order"),
        "order": mean("order"),
        "prose_pages_with_tables": sum(1 for r in prose if r["tables"]),
        "tables": sum(r["tables"] for r in items),
        "dropped": sum(1 for r in items if r["dropped"]),
        "dropped_readable": sum(1 for r in items if r["dropped"] and r["raw_recall"] >= READABLE),
        "for_review": sum(1 for r in items if r["review"]),
        "raw_pages_per_cpu_s": round(len(items) / max(raw_cpu, 1e-9), 3),
        "pages_per_cpu_s": round(len(items) / max(cpu, 1e-9), 3),
        "speed_vs_raw": round(raw_cpu / max(cpu, 1e-9), 3),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per set and class (and ``all``): ``figures`` of the checkout run, and
    of the ``before`` checkout when it ran (under ``before``)."""
    out: dict[str, Any] = {}
    for split in ("tune", "report"):
        mine = [r for r in rows if r["split"] == split]
        classes = {c: [r for r in mine if r["class"] == c] for c in dict.fromkeys(r["class"] for r in mine)}
        out[split] = {}
        for cls, items in {**classes, "all": mine}.items():
            if not items:
                continue
            out[split][cls] = figures(items)
            if all("before" in r for r in items):
                shared = ("key", "class", "split", "raw_cer", "raw_recall", "raw_cpu_s", "raw_order")
                before = [{**{k: r[k] for k in shared if k in r}, **r["before"]} for r in items]
                out[split][cls]["before"] = figures(before)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ragsync-eval-scans")
    ap.add_argument("--set", choices=("tune", "report", "all"), default="all")
    ap.add_argument("--classes", default="", help="comma-separated classes (default: all)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many pages (0: all)")
    ap.add_argument("--per-class", type=int, default=0, help="at most this many pages of a class and set")
    ap.add_argument("--jobs", type=int, default=2, help="pages scored at once (default 2)")
    ap.add_argument("--label", default="run", help="results go to WORK/LABEL.json")
    ap.add_argument(
        "--reuse-raw", default="", help="take raw Tesseract's runs from WORK/LABEL.json (no speed ratio then)"
    )
    ap.add_argument("--repo", type=Path, default=REPO, help="the ragsync checkout to run (default: this one)")
    ap.add_argument("--before", type=Path, default=None, help="also run this checkout on each page (before)")
    ap.add_argument("--json", action="store_true", help="print the JSON summary (else a table)")
    args = ap.parse_args(argv)
    if not (args.corpus / "documents").is_dir():
        print(f"corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    pages = build(args.corpus, args.work)
    classes = set(filter(None, args.classes.split(",")))
    pages = [p for p in pages if (args.set in ("all", p.split)) and (not classes or p.cls in classes)]
    pages = sample(pages, args.per_class) if args.per_class else pages
    pages = pages[: args.limit] if args.limit else pages
    reuse = None
    if args.reuse_raw:
        reuse = {r["key"]: r for r in json.loads((args.work / f"{args.reuse_raw}.json").read_text())["pages"]}
    load = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    partial = args.work / f"{args.label}.partial.jsonl"  # rows as they come, for a run cut short
    partial.write_text("")
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futures = [pool.submit(score_page, p, reuse, args.repo, args.before) for p in pages]
        for i, future in enumerate(as_completed(futures), start=1):
            row = future.result()
            rows.append(row)
            with partial.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(
                f"[{i}/{len(pages)}] {row['key']} ({row['class']}, {row['split']}): CER raw {row['raw_cer']} "
                f"ragsync {row['cer']}, tables {row['tables']}, cpu {row['raw_cpu_s']} / {row['cpu_s']} s"
                + (f", error {row['error']}" if row["error"] else ""),
                file=sys.stderr,
            )
    result: dict[str, Any] = {
        "summary": summarise(rows),
        "load_average": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "speed_measured": not args.reuse_raw,
        "pages": rows,
    }
    (args.work / f"{args.label}.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "pages"}, indent=1))
    else:
        print_table(result["summary"])
    return 0


def print_table(summary: dict[str, Any]) -> None:
    """The summary as a Markdown table, one row per set and class."""
    print(
        "| set | class | pages | CER raw / ragsync | recall raw / ragsync | order raw / ragsync "
        "| prose pages with tables | dropped (readable) | pages per CPU-s raw / ragsync |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for split, classes in summary.items():
        for cls, s in classes.items():
            order = f"{s['raw_order']} / {s['order']}" if s["order"] is not None else ""
            print(
                f"| {split} | {cls} | {s['pages']} | {s['raw_cer']} / {s['cer']} "
                f"| {s['raw_recall']} / {s['recall']} | {order} | {s['prose_pages_with_tables']} "
                f"| {s['dropped']} ({s['dropped_readable']}) | "
                f"{s['raw_pages_per_cpu_s']} / {s['pages_per_cpu_s']} ({s['speed_vs_raw']}x) |"
            )


if __name__ == "__main__":
    raise SystemExit(main())
