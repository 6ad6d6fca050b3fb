"""A second OCR engine (rapidocr-onnxruntime, models inside the wheel) next to Tesseract.

Not a project dependency: install it apart, e.g.
``pip install --target /tmp/rapid rapidocr-onnxruntime``, and pass ``--site /tmp/rapid``
(appended to ``sys.path`` after the project's own packages, so their numpy and Pillow win).

Scores on the corpus's OCR ground truth:

* ``tesseract-test`` pages with transcriptions: character error rate of our
  Tesseract path (``ocr_page``) and of rapidocr (boxes sorted into lines by
  their top edge), Tesseract's confidence, CPU seconds of each;
* the first 10 PubTabNet table crops (every one below Tesseract's bar): token
  recall of the human cell text (order-free, since a table has no single
  reading order).

The question it answers: does rapidocr on pages where Tesseract's confidence is
low lower the CER on the ground truth?

Usage: ``python benchmarks/eval_second_ocr.py --site DIR [--corpus PATH]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from ragsync.parsing.ocr import OcrOptions, iter_image_pages, ocr_page  # noqa: E402
from ragsync.parsing.ocr_quality import char_error_rate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ocr import DEFAULT_CORPUS, IMAGES  # noqa: E402

# The tesseract-test pages that have a transcription, upright (bench_ocr's first four).
PAGES = IMAGES[:4]


def _rapid_text(engine: Any, gray: np.ndarray) -> tuple[str, float]:
    result, _ = engine(np.stack([gray] * 3, axis=-1))
    if not result:
        return "", 0.0
    items = sorted(
        (min(p[1] for p in box), min(p[0] for p in box), text, float(score)) for box, text, score in result
    )
    lines: list[tuple[float, list[tuple[float, str]]]] = []
    for y, x, text, _ in items:
        if lines and abs(lines[-1][0] - y) < 12:
            lines[-1][1].append((x, text))
        else:
            lines.append((y, [(x, text)]))
    joined = "\n".join(" ".join(t for _, t in sorted(words)) for _, words in lines)
    return joined, 100 * float(np.mean([s for *_, s in items]))


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _recall(truth: list[str], got: list[str]) -> float:
    have = Counter(got)
    return sum(min(n, have[t]) for t, n in Counter(truth).items()) / max(len(truth), 1)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--site", required=True, help="folder where rapidocr-onnxruntime was installed with --target"
    )
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = ap.parse_args(argv)
    sys.path.append(args.site)
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    base = args.corpus / "ocr_groundtruth" / "tesseract-test"
    rows: list[dict[str, Any]] = []
    for image, truth in PAGES:
        page = next(iter_image_pages((base / image).read_bytes()))
        ref = (base / truth).read_text(encoding="utf-8").replace("-\n", "")
        t0 = time.process_time()
        ours = ocr_page(page, OcrOptions())
        t1 = time.process_time()
        rapid, rapid_conf = _rapid_text(engine, page.gray)
        t2 = time.process_time()
        rows.append(
            {
                "page": image,
                "tesseract_cer": round(char_error_rate("\n".join(ours.paragraph_texts()), ref), 4),
                "tesseract_conf": round(ours.confidence, 1),
                "rapid_cer": round(char_error_rate(rapid, ref), 4),
                "rapid_conf": round(rapid_conf, 1),
                "tesseract_cpu_s": round(t1 - t0, 2),
                "rapid_cpu_s": round(t2 - t1, 2),
            }
        )
    tables: list[dict[str, Any]] = []
    folder = args.corpus / "parse_groundtruth" / "pubtabnet" / "examples"
    for line in (folder / "PubTabNet_Examples.jsonl").read_text(encoding="utf-8").splitlines()[:10]:
        rec = json.loads(line)
        cells = [
            "".join(t for t in c["tokens"] if not re.fullmatch(r"</?\w+>", t)) for c in rec["html"]["cells"]
        ]
        truth_tokens = _tokens(" ".join(cells))
        page = next(iter_image_pages((folder / rec["filename"]).read_bytes()))
        ours = ocr_page(page, OcrOptions(retry=False))
        rapid, rapid_conf = _rapid_text(engine, page.gray)
        tables.append(
            {
                "image": rec["filename"],
                "tesseract_conf": round(ours.confidence, 1),
                "tesseract_recall": round(
                    _recall(truth_tokens, _tokens(" ".join(ours.paragraph_texts()))), 3
                ),
                "rapid_recall": round(_recall(truth_tokens, _tokens(rapid)), 3),
                "rapid_conf": round(rapid_conf, 1),
            }
        )
    print(json.dumps({"cer_pages": rows, "pubtabnet": tables}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
