"""Main content of web pages: ours vs trafilatura vs plain BeautifulSoup text, side by side in one run.

Metric (token level, as in the issue): tokens are lower-cased letter/digit runs
(``eval_parse.tokens``); per page, **recall** = shared tokens (multiset) / truth
tokens and **precision** = shared tokens / extracted tokens; the table shows the
mean over pages (an empty extraction scores recall 0, precision 0). Speed is
milliseconds per page of each extractor on the same bytes, interleaved page by
page, and ours ÷ trafilatura.

Extractors:

* **ours**: ``ragsync.parsing.parse(data, "text/html")``, element texts joined;
* **trafilatura**: ``trafilatura.extract(data, include_tables=True, include_comments=False)``;
* **bs4 text**: BeautifulSoup (lxml) ``get_text`` with script/style/noscript removed;
* **before** (``--before-ref``, default ``main``): the project as it was, detection
  included: ``detect.py`` and ``parsing/html.py`` loaded from git; a page not
  detected as HTML counts as empty (it was dead-lettered ``unsupported``).

Page sets:

* ``articles``: pages with a human-marked article body. **The shared corpus has
  none** (its ``GROUND_TRUTH_INDEX.tsv`` pairs HTML only with docling's Markdown
  snapshots). Pass ``--articles DIR`` with a folder in the layout of scrapinghub's
  public article-extraction-benchmark (``html/<id>.html.gz`` plus
  ``ground-truth.json`` with ``articleBody`` per id; 181 news and blog pages,
  bodies marked by people): the set on which trafilatura's published figures (0.983 / 0.933) were measured.
* ``corpus-docling``: the 32 HTML pages of the shared corpus with an expected text,
  ``documents/docling/html/sources`` against ``parse_groundtruth/docling/html/groundtruth/*.md``.
  Nature: **tool-regression snapshot** (docling's output accepted by its
  maintainers), and these are test pages of structure (tables, lists, headings),
  not articles: they check that non-article pages keep their text.
* ``corpus-other`` (no truth): every other ``.html``/``.htm`` file of the corpus;
  only what share of the bs4 text each extractor keeps and which reading ours
  chose, listing pages where ours keeps under half.

Usage::

    python benchmarks/bench_web.py [--articles DIR] [--limit N] [--before-ref main] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
CORPUS = Path(os.environ.get("RAGSYNC_CORPUS", ROOT.parent / "shared" / "corpus"))

from eval_parse import strip_markdown, tokens  # noqa: E402

from ragsync.errors import RagsyncError  # noqa: E402
from ragsync.parsing import parse  # noqa: E402

Page = tuple[str, bytes, str | None]  # (name, html bytes, truth text or None)


def ours(data: bytes) -> tuple[str, str]:
    """Our parser's text and the reading it chose."""
    try:
        result = parse(data, "text/html")
    except RagsyncError as exc:
        return "", exc.error_class
    return "\n".join(e.text for e in result.elements), result.metadata.get("reading", "")


def _load_from_git(ref: str, path: str, module: str) -> Any:
    import importlib.util
    import subprocess
    import tempfile

    command = ["git", "-C", str(ROOT), "show", f"{ref}:{path}"]
    source = subprocess.run(command, check=True, capture_output=True)
    with tempfile.NamedTemporaryFile("wb", suffix=f"_{module}.py", delete=False) as fh:
        fh.write(source.stdout)
    spec = importlib.util.spec_from_file_location(module, fh.name)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    os.unlink(fh.name)
    return loaded


def before_extractor(ref: str) -> Callable[[bytes], str]:
    """The HTML path of ``ref``: its detection, then its HTML parser when that said HTML."""
    detect = _load_from_git(ref, "ragsync/ingest/detect.py", "detect_before")
    html = _load_from_git(ref, "ragsync/parsing/html.py", "html_before")

    def run(data: bytes) -> str:
        if detect.detect_mime(data, "page.html") not in ("text/html", "application/xhtml+xml"):
            return ""  # dead-lettered unsupported (or parsed as something else)
        return "\n".join(e.text for e in html.parse_html(data).elements)

    return run


def trafilatura_text(data: bytes) -> str:
    import trafilatura

    return trafilatura.extract(data, include_tables=True, include_comments=False) or ""


def bs4_text(data: bytes) -> str:
    import warnings

    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
    soup = BeautifulSoup(data, "lxml")
    for tag in soup(["script", "style", "noscript"]):
        tag.decompose()
    return soup.get_text(" ")


def recall_precision(got: str, truth: str) -> tuple[float, float]:
    """Token-level recall and precision of ``got`` against ``truth`` (multisets)."""
    want, have = Counter(tokens(truth)), Counter(tokens(got))
    shared = sum((want & have).values())
    recall = shared / sum(want.values()) if want else 1.0
    precision = shared / sum(have.values()) if have else 0.0
    return recall, precision


def article_pages(folder: str, limit: int) -> list[Page]:
    root = Path(folder)
    truth = json.loads((root / "ground-truth.json").read_text(encoding="utf-8"))
    pages: list[Page] = []
    for key in sorted(truth)[: limit or None]:
        data = gzip.decompress((root / "html" / f"{key}.html.gz").read_bytes())
        pages.append((key[:12], data, truth[key].get("articleBody", "")))
    return pages


def docling_pages(limit: int) -> list[Page]:
    sources = CORPUS / "documents" / "docling" / "html" / "sources"
    truth_dir = CORPUS / "parse_groundtruth" / "docling" / "html" / "groundtruth"
    pages: list[Page] = []
    for path in sorted(sources.glob("*.html"))[: limit or None]:
        md = truth_dir / f"{path.name}.md"
        if md.is_file():
            pages.append((path.name, path.read_bytes(), strip_markdown(md.read_text(encoding="utf-8"))))
    return pages


def other_pages(limit: int) -> list[Page]:
    docling = CORPUS / "documents" / "docling" / "html"
    found = [
        p
        for p in sorted((CORPUS / "documents").rglob("*"))
        if p.suffix.lower() in (".html", ".htm") and docling not in p.parents and p.is_file()
    ]
    return [
        (p.relative_to(CORPUS / "documents").as_posix(), p.read_bytes(), None) for p in found[: limit or None]
    ]


EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "ours": lambda data: ours(data)[0],
    "trafilatura": trafilatura_text,
    "bs4 text": bs4_text,
}


def score(pages: list[Page]) -> dict[str, Any]:
    per: dict[str, list[tuple[float, float]]] = {name: [] for name in EXTRACTORS}
    seconds = Counter[str]()
    readings = Counter[str]()
    low: list[str] = []
    kept: dict[str, list[float]] = {name: [] for name in EXTRACTORS}
    for name, data, truth in pages:
        texts: dict[str, str] = {}
        for extractor, fn in EXTRACTORS.items():
            started = time.perf_counter()
            texts[extractor] = fn(data)
            seconds[extractor] += time.perf_counter() - started
        readings[ours(data)[1]] += 1
        if truth is not None:
            for extractor, text in texts.items():
                per[extractor].append(recall_precision(text, truth))
        base = Counter(tokens(texts["bs4 text"]))
        total = sum(base.values()) or 1
        for extractor, text in texts.items():
            kept[extractor].append(sum((Counter(tokens(text)) & base).values()) / total)
        if truth is None and kept["ours"][-1] < 0.5:
            low.append(f"{name}: ours keeps {kept['ours'][-1]:.2f} of the bs4 text ({ours(data)[1]})")
    out: dict[str, Any] = {"pages": len(pages), "readings": dict(readings), "low": low}
    for extractor in EXTRACTORS:
        row: dict[str, float] = {
            "ms_per_page": 1000 * seconds[extractor] / max(1, len(pages)),
            "kept_of_bs4": statistics.mean(kept[extractor]) if kept[extractor] else 0.0,
        }
        if per[extractor]:
            row["recall"] = statistics.mean(r for r, _ in per[extractor])
            row["precision"] = statistics.mean(p for _, p in per[extractor])
            row["pages_recall_ge_0.95"] = sum(1 for r, _ in per[extractor] if r >= 0.95) / len(per[extractor])
        out[extractor] = row
    return out


def render(results: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    for set_name, res in results.items():
        lines += [
            f"### {set_name} ({res['pages']} pages; our readings: {res['readings']})",
            "",
            "| extractor | recall | precision | pages with recall >= 0.95 | kept of bs4 text | ms/page |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for extractor in EXTRACTORS:
            row = res[extractor]
            nan = float("nan")
            recall, precision = row.get("recall", nan), row.get("precision", nan)
            lines.append(
                f"| {extractor} | {recall:.3f} | {precision:.3f} | "
                f"{row.get('pages_recall_ge_0.95', nan):.2f} | {row['kept_of_bs4']:.2f} | "
                f"{row['ms_per_page']:.1f} |"
            )
        ratio = res["ours"]["ms_per_page"] / max(1e-9, res["trafilatura"]["ms_per_page"])
        lines += ["", f"ours ÷ trafilatura time per page: {ratio:.2f}"]
        lines += [f"  {line}" for line in res["low"]]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--articles", default="", help="folder with html/*.html.gz and ground-truth.json")
    parser.add_argument("--limit", type=int, default=0, help="at most N pages per set (0: all)")
    parser.add_argument("--before-ref", default="main", help="git ref for the 'before' column ('' to skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.before_ref:
        EXTRACTORS["before"] = before_extractor(args.before_ref)
    if not (CORPUS / "documents").is_dir():
        print(f"shared corpus not found at {CORPUS} (set RAGSYNC_CORPUS)", file=sys.stderr)
        return 2
    for data in (b"<html><body><p>warm up</p></body></html>",):
        for fn in EXTRACTORS.values():
            fn(data)
    results: dict[str, dict[str, Any]] = {}
    if args.articles:
        results["articles (human-marked bodies, --articles)"] = score(
            article_pages(args.articles, args.limit)
        )
    else:
        print("no --articles folder: the shared corpus has no human-marked article bodies", file=sys.stderr)
    results["corpus-docling (docling snapshots: tool-regression, not human)"] = score(
        docling_pages(args.limit)
    )
    results["corpus-other (no truth)"] = score(other_pages(args.limit))
    print(json.dumps(results, indent=1) if args.json else render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
