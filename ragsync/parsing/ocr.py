"""OCR of page images with the Tesseract command-line tool.

Each page is one ``tesseract stdin stdout tsv`` process fed an uncompressed
8-bit PGM on stdin, with ``OMP_THREAD_LIMIT=1`` (Tesseract's own OpenMP
threading makes a page ~5x slower on a busy machine) and a per-page time
limit. Pages run in parallel: a thread pool of ``min(pages, cpus)`` threads
drives one single-threaded Tesseract process per page (the threads only
wait on pipes and run numpy, so the GIL is not a bottleneck, no page image
is pickled, and nothing is forked from a possibly multi-threaded worker).

Quality bar. Mean word confidence alone misses the worst failure: on a bad
scan Tesseract drops whole regions while the confidence of the words it does
keep stays at 80+. So every page also gets a *coverage*: the fraction of the
page's ink (pixels clearly darker than the paper) that lies inside recognised
word boxes. A page passes when ``confidence >= min_confidence`` and
``coverage >= min_coverage``; a failing page is retried once on a denoised,
binarised copy with ``--psm 6`` and the better of the two results is kept.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import threading
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragsync.errors import ConfigurationError, CorruptDocumentError, TooLargeError, UnsupportedFormatError
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image as PILImage

GrayImage = NDArray[np.uint8]

DEFAULT_MIN_CONFIDENCE = 60.0
# Coverage counts only text-like ink (see ``text_ink``). Measured on 27 corpus pages
# (tesseract-test images, ocrmypdf-resources scans rendered at 300 dpi): text pages 0.91-1.00
# (0.91: c02-22.pdf with a photo; the magazine pages with photos 0.995), a chart (graph.pdf)
# 0.29, a photo with a few words (baiona.png) 0.62, noise pages 0 (no words). A page where
# Tesseract misses half the text scores ~0.5 (tests/test_ocr.py). 0.7 keeps a margin of 0.2
# below the worst real text page and flags a third or more of the text missing.
DEFAULT_MIN_COVERAGE = 0.7
DEFAULT_MAX_PIXELS = 100_000_000
DEFAULT_PAGE_TIMEOUT_S = 120.0
# PDF pages are rendered at 300 dpi, scaled down so that one page stays under this many pixels.
DEFAULT_MAX_RENDER_PIXELS = 25_000_000
RENDER_DPI = 300.0

# A PDF page with fewer non-blank characters than this in its text layer, and an image, is OCR'd.
MIN_TEXT_LAYER_CHARS = 50
# ... when its images cover at least this fraction of the page.
_MIN_IMAGE_AREA = 0.05
_MAX_OBJECTS_SCANNED = 2000

# Ink below this fraction of the page: nothing legible, the page is blank (Tesseract is not run).
_BLANK_INK = 0.0001
# No word recognised and ink below this fraction: specks and dust, still a blank page.
_SPECK_INK = 0.005
_BOX_PAD = 2

_WS = re.compile(r"\s+")
_TESSERACT_LOCK = threading.Lock()
_tesseract_path: str | None = None


@dataclass(frozen=True)
class OcrOptions:
    """Settings of the OCR path.

    Attributes:
        min_confidence: mean word confidence (0-100) a page needs to pass.
        min_coverage: fraction of the page's ink inside recognised word
            boxes a page needs to pass (0-1).
        lang: Tesseract language(s), e.g. ``"eng"`` or ``"eng+deu"``.
        timeout_s: limit for one Tesseract run on one page; a page that runs
            past it fails the bar.
        max_pixels: images (or PDF image objects) above this many pixels are
            refused with ``TooLargeError`` before they are decoded.
        max_render_pixels: PDF pages are rendered at 300 dpi, or lower so
            that a page stays under this many pixels.
        workers: parallel Tesseract processes; ``None`` means
            ``min(pages, usable cpus)``.
        retry: retry a failing page once on a denoised, binarised copy with
            ``--psm 6``.
    """

    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    min_coverage: float = DEFAULT_MIN_COVERAGE
    lang: str = "eng"
    timeout_s: float = DEFAULT_PAGE_TIMEOUT_S
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_render_pixels: int = DEFAULT_MAX_RENDER_PIXELS
    workers: int | None = None
    retry: bool = True


@dataclass(frozen=True)
class PageImage:
    """One page to OCR.

    Attributes:
        page: 1-based page number reported back in ``PageOcr.page``.
        gray: 8-bit grayscale pixels, shape ``(height, width)``, 0 = black.
        dpi: resolution told to Tesseract (0 lets Tesseract estimate it).
    """

    page: int
    gray: GrayImage
    dpi: int = 300


@dataclass(frozen=True)
class PageOcr:
    """OCR result of one page.

    Attributes:
        page: 1-based page number.
        paragraphs: paragraphs in reading order, each a tuple of its lines
            as Tesseract recognised them (hyphens kept).
        confidence: mean word confidence 0-100 (0 when no word).
        coverage: fraction of ink pixels inside recognised word boxes (0-1;
            1 for a blank page).
        words: number of recognised words.
        ink: fraction of the page's pixels that are ink.
        passed: whether the page met the bar (a blank page passes, with no text).
        blank: nothing legible on the page.
        psm: Tesseract page segmentation mode of the kept result.
        retried: whether the denoise + ``--psm 6`` retry ran.
        error: why Tesseract gave no result (timeout, crash), else ``""``.
        seconds: wall time spent on the page.
        rotation: clockwise degrees the kept result's image was turned
            (orientation detection in the retry), 0 otherwise.
    """

    page: int
    paragraphs: tuple[tuple[str, ...], ...]
    confidence: float
    coverage: float
    words: int
    ink: float
    passed: bool
    blank: bool = False
    psm: int = 3
    retried: bool = False
    error: str = ""
    seconds: float = 0.0
    rotation: int = 0

    @property
    def text(self) -> str:
        """Lines joined by newlines, paragraphs by blank lines (hyphens kept)."""
        return "\n\n".join("\n".join(lines) for lines in self.paragraphs)

    def paragraph_texts(self) -> list[str]:
        """Each paragraph on one line, words split at line ends rejoined.

        Returns:
            Non-empty paragraph strings in reading order.
        """
        out: list[str] = []
        for lines in self.paragraphs:
            text = ""
            for line in lines:
                line = _WS.sub(" ", line).strip()
                if not line:
                    continue
                if not text:
                    text = line
                elif len(text) > 1 and text.endswith("-") and text[-2].isalpha() and line[:1].islower():
                    text = text[:-1] + line
                else:
                    text = text + " " + line
            if text:
                out.append(text)
        return out


@dataclass
class OcrRawParse(RawParse):
    """A ``RawParse`` with the OCR outcome; ``parse`` copies both into ``ParseResult``.

    Attributes:
        pages_for_review: 1-based pages below the OCR bar (not emitted).
        ocr_confidence: mean word confidence over the non-blank OCR'd pages,
            ``None`` when no page was OCR'd.
    """

    pages_for_review: tuple[int, ...] = ()
    ocr_confidence: float | None = None


@dataclass
class _Tsv:
    paragraphs: list[list[str]] = field(default_factory=list)
    confs: list[float] = field(default_factory=list)
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)


# --------------------------------------------------------------------------- tesseract


def tesseract_path() -> str:
    """Locate the ``tesseract`` binary (``$TESSERACT`` overrides ``PATH``).

    Returns:
        The executable's path.

    Raises:
        ConfigurationError: Tesseract is not installed.
    """
    global _tesseract_path
    with _TESSERACT_LOCK:
        if _tesseract_path is None:
            found = os.environ.get("TESSERACT") or shutil.which("tesseract")
            if not found:
                raise ConfigurationError(
                    "tesseract not found: install it (apt-get install tesseract-ocr) or set $TESSERACT"
                )
            _tesseract_path = found
        return _tesseract_path


def tesseract_env() -> dict[str, str]:
    """The environment for a Tesseract run: ours with ``OMP_THREAD_LIMIT=1``.

    Returns:
        A new environment mapping.
    """
    return {**os.environ, "OMP_THREAD_LIMIT": "1"}


def to_pgm(gray: GrayImage) -> bytes:
    """Encode 8-bit grayscale pixels as binary PGM, or PBM when only 0 and 255 occur.

    Uncompressed netpbm is what Tesseract reads from stdin fastest; a
    bilevel page sent as PBM also skips Tesseract's own thresholding
    (~8% less CPU on a 300 dpi page).

    Args:
        gray: ``(height, width)`` uint8 array.

    Returns:
        The PGM (``P5``) or PBM (``P4``) file bytes.
    """
    h, w = gray.shape
    arr = np.ascontiguousarray(gray, dtype=np.uint8)
    if not np.any((arr != 0) & (arr != 255)):
        return b"P4\n%d %d\n" % (w, h) + np.packbits(arr == 0, axis=1).tobytes()
    return b"P5\n%d %d\n255\n" % (w, h) + arr.tobytes()


def _run_tesseract(
    gray: GrayImage, psm: int, dpi: int, options: OcrOptions, *, tsv: bool = True, with_stderr: bool = False
) -> str:
    """Run Tesseract on one image and return its TSV output (plain when ``tsv`` is False).

    ``with_stderr`` appends Tesseract's stderr (where ``--psm 0`` prints its
    orientation report).

    Raises:
        TimeoutError: past ``options.timeout_s``.
        RuntimeError: Tesseract exited with an error.
    """
    lang = "osd" if psm == 0 else options.lang  # OSD with -l eng misreads 180-degree pages
    cmd = [tesseract_path(), "stdin", "stdout", "--psm", str(psm), "-l", lang]
    if dpi > 0:
        cmd += ["--dpi", str(dpi)]
    if tsv:
        cmd.append("tsv")
    killer = shutil.which("timeout")
    if killer:  # the page dies on time even if this process is killed first
        cmd = [killer, "-s", "KILL", f"{options.timeout_s:.0f}", *cmd]
    try:
        proc = subprocess.run(
            cmd,
            input=to_pgm(gray),
            capture_output=True,
            env=tesseract_env(),
            timeout=options.timeout_s + 5,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"tesseract ran past {options.timeout_s:.0f} s") from exc
    if proc.returncode == 137 or proc.returncode == -9:
        raise TimeoutError(f"tesseract ran past {options.timeout_s:.0f} s")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"tesseract exited {proc.returncode}: {err[-1] if err else ''}")
    out = proc.stdout.decode("utf-8", "replace")
    return out + "\n" + proc.stderr.decode("utf-8", "replace") if with_stderr else out


def parse_tsv(tsv: str) -> _Tsv:
    """Read Tesseract's TSV: words grouped into lines and paragraphs in output (reading) order.

    Args:
        tsv: the TSV text (header line first).

    Returns:
        Paragraphs (lists of lines), word confidences and word boxes
        ``(left, top, right, bottom)`` of non-empty words.
    """
    out = _Tsv()
    para_key: tuple[str, str, str] | None = None
    line_key: tuple[str, str, str, str] | None = None
    line_words: list[str] = []

    def flush_line() -> None:
        if line_words:
            out.paragraphs[-1].append(" ".join(line_words))
            line_words.clear()

    for row in tsv.splitlines()[1:]:
        f = row.split("\t")
        if len(f) < 12 or f[0] != "5":
            continue
        text = f[11].strip()
        try:
            conf = float(f[10])
        except ValueError:
            continue
        if not text or conf < 0:
            continue
        pkey = (f[1], f[2], f[3])
        lkey = (f[1], f[2], f[3], f[4])
        if lkey != line_key:
            flush_line()
            line_key = lkey
        if pkey != para_key:
            out.paragraphs.append([])
            para_key = pkey
        line_words.append(text)
        out.confs.append(conf)
        left, top, width, height = (int(v) for v in f[6:10])
        out.boxes.append((left, top, left + width, top + height))
    flush_line()
    out.paragraphs = [p for p in out.paragraphs if p]
    return out


# --------------------------------------------------------------------------- image measures


def ink_mask(gray: GrayImage) -> NDArray[np.bool_]:
    """Pixels that are ink: darker than both Otsu's threshold and the paper minus 60 levels.

    The second condition keeps scanner noise on a blank page (where Otsu's
    threshold falls inside the noise) from counting as ink.

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        Boolean mask of the same shape.
    """
    hist = np.bincount(gray.ravel(), minlength=256).astype(np.float64)
    total = hist.sum()
    if total == 0:
        return np.zeros(gray.shape, dtype=bool)
    levels = np.arange(256, dtype=np.float64)
    w0 = np.cumsum(hist)
    m0 = np.cumsum(hist * levels)
    w1 = total - w0
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (m0[-1] * w0 / total - m0) ** 2 / (w0 * w1)
    between = np.nan_to_num(between)
    otsu = int(np.argmax(between)) + 1
    paper = int(np.searchsorted(w0, 0.9 * total))  # 90th percentile brightness
    threshold = min(otsu, paper - 60)
    return gray < threshold


def text_ink(ink: NDArray[np.bool_], dpi: int) -> tuple[NDArray[np.bool_], int]:
    """Ink that looks like text: connected components at most 0.4 in tall and 2 in wide.

    Photos, rules, table grids, big logos and solid fills form larger
    components and are left out, so a page with a picture is not mistaken
    for one where Tesseract missed text. The mask is OR-pooled 2x2 first on
    pages above 2 megapixels (4x less work, same geometry). Without scipy
    every ink pixel counts as text.

    Args:
        ink: ink mask (see ``ink_mask``).
        dpi: resolution of the mask (0: assume 300).

    Returns:
        ``(mask, factor)``: the text-ink mask, pooled by ``factor`` (1 or 2).
    """
    factor = 2 if ink.size > 2_000_000 else 1
    if factor == 2:
        h, w = (ink.shape[0] // 2) * 2, (ink.shape[1] // 2) * 2
        ink = ink[:h:2, :w:2] | ink[1:h:2, :w:2] | ink[:h:2, 1:w:2] | ink[1:h:2, 1:w:2]
    try:
        from scipy import ndimage
    except ImportError:  # pragma: no cover - scipy is optional
        return ink, factor
    res = (dpi or 300) / factor
    labels, n = ndimage.label(ink, structure=np.ones((3, 3), dtype=bool))
    if n == 0:
        return ink, factor
    keep = np.zeros(n + 1, dtype=bool)
    max_h, max_w = 0.4 * res, 2.0 * res
    for i, sl in enumerate(ndimage.find_objects(labels)):
        if sl is not None:
            keep[i + 1] = (sl[0].stop - sl[0].start) <= max_h and (sl[1].stop - sl[1].start) <= max_w
    return keep[labels], factor


def coverage(ink: NDArray[np.bool_], boxes: Sequence[tuple[int, int, int, int]], factor: int = 1) -> float:
    """Fraction of ink pixels inside the word boxes (each padded by 2 px).

    Args:
        ink: ink mask, possibly pooled.
        boxes: ``(left, top, right, bottom)`` boxes in full-resolution pixels.
        factor: how much ``ink`` was pooled (boxes are divided by it).

    Returns:
        0-1; 1.0 when there is no ink at all.
    """
    total = int(np.count_nonzero(ink))
    if total == 0:
        return 1.0
    h, w = ink.shape
    covered = np.zeros(ink.shape, dtype=bool)
    for left, top, right, bottom in boxes:
        y0, y1 = max((top - _BOX_PAD) // factor, 0), min(-(-(bottom + _BOX_PAD) // factor), h)
        x0, x1 = max((left - _BOX_PAD) // factor, 0), min(-(-(right + _BOX_PAD) // factor), w)
        covered[y0:y1, x0:x1] = True
    return int(np.count_nonzero(ink & covered)) / total


def denoise(gray: GrayImage) -> GrayImage:
    """Binarise (see ``ink_mask``) and remove specks with a 3x3 majority filter.

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        A black-on-white image with values 0 and 255.
    """
    ink = ink_mask(gray)
    padded = np.pad(ink, 1).astype(np.uint8)
    h, w = ink.shape
    votes = np.zeros((h, w), dtype=np.uint8)
    for dy in range(3):
        for dx in range(3):
            votes += padded[dy : dy + h, dx : dx + w]
    return np.where(votes >= 5, 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- one page


def _attempt(
    page: PageImage,
    image: GrayImage,
    ink_frac: float,
    text: tuple[NDArray[np.bool_], int],
    psm: int,
    options: OcrOptions,
) -> PageOcr:
    try:
        tsv = parse_tsv(_run_tesseract(image, psm, page.dpi, options))
    except (TimeoutError, RuntimeError, OSError) as exc:
        return PageOcr(page.page, (), 0.0, 0.0, 0, ink_frac, False, psm=psm, error=str(exc))
    words = len(tsv.confs)
    if words == 0 and ink_frac < _SPECK_INK:
        return PageOcr(page.page, (), 0.0, 1.0, 0, ink_frac, True, blank=True, psm=psm)
    conf = float(np.mean(tsv.confs)) if words else 0.0
    cov = coverage(text[0], tsv.boxes, text[1])
    passed = words > 0 and conf >= options.min_confidence and cov >= options.min_coverage
    paragraphs = tuple(tuple(p) for p in tsv.paragraphs)
    return PageOcr(page.page, paragraphs, conf, cov, words, ink_frac, passed, psm=psm)


def _orientation(gray: GrayImage, dpi: int, options: OcrOptions) -> int:
    """Clockwise rotation (0/90/180/270) that makes the page upright, by Tesseract's OSD.

    Returns 0 when OSD is unsure (orientation confidence < 2) or fails.
    """
    try:
        out = _run_tesseract(gray, 0, dpi, options, tsv=False, with_stderr=True)
    except (TimeoutError, RuntimeError, OSError):
        return 0
    rotate = re.search(r"^Rotate:\s*(\d+)", out, re.M)
    conf = re.search(r"^Orientation confidence:\s*([\d.]+)", out, re.M)
    if not rotate or not conf or float(conf.group(1)) < 2.0:
        return 0
    angle = int(rotate.group(1)) % 360
    return angle if angle in (90, 180, 270) else 0


def _score(r: PageOcr) -> tuple[bool, float]:
    return (r.passed, r.confidence * r.coverage)


def ocr_page(page: PageImage, options: OcrOptions | None = None) -> PageOcr:
    """OCR one page image and judge it against the bar.

    Runs ``--psm 3`` (automatic layout) first; a page below the bar is retried
    once on ``denoise(gray)`` with ``--psm 6`` (one uniform block; ``--psm 3``
    again when the first pass found under 20 words), turned
    upright first when Tesseract's orientation detection (``--psm 0``, only
    when the first pass found 5+ words) is sure the page is rotated, and the
    better result is kept (a passing one first, then the higher
    confidence x coverage). A page with (almost) no ink is blank: it passes
    with no text and Tesseract is not run.

    Args:
        page: the page image.
        options: bar and limits; defaults when ``None``.

    Returns:
        The page's ``PageOcr``. Never raises for a bad page: a Tesseract
        crash or timeout gives a failing result with ``error`` set.

    Raises:
        ConfigurationError: Tesseract is not installed.
    """
    import time

    opts = options or OcrOptions()
    started = time.monotonic()
    gray = page.gray
    ink = ink_mask(gray)
    ink_frac = float(np.count_nonzero(ink)) / max(ink.size, 1)
    if ink_frac < _BLANK_INK:
        return PageOcr(page.page, (), 0.0, 1.0, 0, ink_frac, True, blank=True, psm=0)
    tesseract_path()
    text = text_ink(ink, page.dpi)
    best = _attempt(page, gray, ink_frac, text, 3, opts)
    if not best.passed and opts.retry and not best.error.startswith("tesseract ran past"):
        cleaned = denoise(gray)
        angle = _orientation(gray, page.dpi, opts) if best.words >= 5 else 0
        if angle:  # np.rot90 turns counter-clockwise
            cleaned = np.ascontiguousarray(np.rot90(cleaned, -angle // 90))
            text = (np.rot90(text[0], -angle // 90), text[1])
        # --psm 6 reads the whole page as one block: it rescues pages where layout analysis
        # dropped regions, but turns a page with no text found at all (noise, a photo) into
        # ~1000 garbage words at 5-10x the cost. Pages with under 20 words are retried with --psm 3.
        psm = 6 if best.words >= 20 else 3
        second = _attempt(page, cleaned, ink_frac, text, psm, opts)
        second = _replace(second, retried=True, rotation=angle)
        best = second if _score(second) > _score(best) else _replace(best, retried=True)
    return _replace(best, seconds=time.monotonic() - started)


def _replace(r: PageOcr, **changes: Any) -> PageOcr:
    import dataclasses

    return dataclasses.replace(r, **changes)


def usable_cpus() -> int:
    """CPUs this process may run on (affinity-aware).

    Returns:
        At least 1.
    """
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        return max(os.cpu_count() or 1, 1)


def ocr_pages(pages: Iterable[PageImage], count: int, options: OcrOptions | None = None) -> list[PageOcr]:
    """OCR many pages in parallel, one single-threaded Tesseract process per page.

    ``pages`` is consumed lazily: at most twice the number of workers page
    images are held at once (rendering a 300 dpi page is ~8 MB).

    Args:
        pages: page images, in any order.
        count: how many pages ``pages`` yields (sizes the pool).
        options: bar and limits; ``options.workers`` or ``min(count, cpus)``.

    Returns:
        One ``PageOcr`` per page, sorted by page number.

    Raises:
        ConfigurationError: Tesseract is not installed.
        Whatever ``pages`` raises while it is iterated (e.g. ``TooLargeError``).
    """
    opts = options or OcrOptions()
    if count <= 0:
        return []
    tesseract_path()
    workers = max(1, min(count, opts.workers or usable_cpus()))
    results: list[PageOcr] = []
    if workers == 1:
        results = [ocr_page(p, opts) for p in pages]
    else:
        inflight: deque[Future[PageOcr]] = deque()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ocr") as pool:
            try:
                for p in pages:
                    while len(inflight) >= 2 * workers:
                        done, _ = wait(list(inflight), return_when="FIRST_COMPLETED")
                        for fut in done:
                            inflight.remove(fut)
                            results.append(fut.result())
                    inflight.append(pool.submit(ocr_page, p, opts))
            finally:
                for fut in inflight:
                    if not fut.cancel():
                        results.append(fut.result())
    return sorted(results, key=lambda r: r.page)


def assemble(results: Sequence[PageOcr]) -> tuple[list[RawElement], tuple[int, ...], float | None]:
    """Turn page results into paragraph elements, review pages and a mean confidence.

    Args:
        results: page results (any order).

    Returns:
        ``(elements, pages_for_review, ocr_confidence)``: a paragraph element
        per paragraph of each passing page, in page order; sorted pages below
        the bar; the mean confidence over non-blank pages (``None`` if all blank).
    """
    elements: list[RawElement] = []
    review: list[int] = []
    confs: list[float] = []
    for r in sorted(results, key=lambda r: r.page):
        if r.blank:
            continue
        confs.append(r.confidence)
        if not r.passed:
            review.append(r.page)
            continue
        elements.extend(RawElement(ElementType.PARAGRAPH, t, 0, r.page) for t in r.paragraph_texts())
    return elements, tuple(review), (float(np.mean(confs)) if confs else None)


# --------------------------------------------------------------------------- image files


def _to_gray(frame: PILImage.Image) -> GrayImage:
    from PIL import Image

    if frame.mode in ("RGBA", "LA", "PA") or (frame.mode == "P" and "transparency" in frame.info):
        rgba = frame.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        frame = Image.alpha_composite(white, rgba)
    if frame.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(frame, dtype=np.float64)
        hi = float(arr.max()) or 1.0
        return np.asarray(arr * (255.0 / hi), dtype=np.uint8)
    return np.asarray(frame.convert("L"), dtype=np.uint8)


def _dpi(frame: PILImage.Image) -> int:
    dpi = frame.info.get("dpi")
    try:
        value = int(round(float(dpi[0]))) if dpi else 0
    except (TypeError, ValueError, IndexError):
        value = 0
    return value if 70 <= value <= 2400 else 0


def image_frame_count(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> int:
    """Open an image file's header and check every frame's size without decoding pixels.

    Args:
        data: PNG/JPEG/TIFF/... bytes.
        max_pixels: pixel limit per frame.

    Returns:
        The number of frames (pages).

    Raises:
        TooLargeError: a frame above ``max_pixels`` (a decompression bomb).
        UnsupportedFormatError: Pillow does not recognise the bytes.
        CorruptDocumentError: the header is unreadable.
    """
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            raise TooLargeError(f"image above the pixel limit: {exc}") from exc
        except UnidentifiedImageError as exc:
            raise UnsupportedFormatError(f"not an image format Pillow can read (or corrupt): {exc}") from exc
        except (OSError, ValueError, SyntaxError) as exc:
            raise CorruptDocumentError(f"unreadable image header: {exc}") from exc
        with im:
            n = int(getattr(im, "n_frames", 1) or 1)
            for i in range(n):
                try:
                    im.seek(i)
                except (EOFError, OSError, ValueError) as exc:
                    raise CorruptDocumentError(f"image frame {i + 1} unreadable: {exc}") from exc
                w, h = im.size
                if w * h > max_pixels:
                    raise TooLargeError(
                        f"image frame {i + 1} is {w}x{h} = {w * h} pixels, above the limit of {max_pixels}"
                    )
    return n


def iter_image_pages(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Iterator[PageImage]:
    """Decode an image file's frames one at a time as grayscale pages.

    Call ``image_frame_count`` first: it refuses oversized frames before any
    pixel is decoded. EXIF orientation is applied; transparency is flattened
    onto white.

    Args:
        data: PNG/JPEG/TIFF/... bytes (a multi-page TIFF yields every page).
        max_pixels: pixel limit per frame (checked again per frame).

    Yields:
        ``PageImage`` with pages numbered from 1 and the file's dpi (0 if unknown).

    Raises:
        TooLargeError: a frame above ``max_pixels``.
        CorruptDocumentError: truncated or undecodable pixel data.
    """
    from PIL import Image, ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            raise TooLargeError(f"image above the pixel limit: {exc}") from exc
        with im:
            n = int(getattr(im, "n_frames", 1) or 1)
            for i in range(n):
                try:
                    im.seek(i)
                    w, h = im.size
                    if w * h > max_pixels:
                        raise TooLargeError(f"image frame {i + 1} is {w}x{h} pixels, above {max_pixels}")
                    im.load()
                    frame = ImageOps.exif_transpose(im) if i == 0 else im
                    gray = _to_gray(frame)
                    dpi = _dpi(im)
                except TooLargeError:
                    raise
                except (OSError, ValueError, SyntaxError, EOFError) as exc:
                    raise CorruptDocumentError(f"image frame {i + 1} undecodable: {exc}") from exc
                yield PageImage(i + 1, gray, dpi)


def parse_image(data: bytes, *, max_pages: int = 2000, options: OcrOptions | None = None) -> OcrRawParse:
    """OCR an image file (PNG, JPEG, TIFF including multi-page, BMP, WebP).

    Args:
        data: the image bytes.
        max_pages: frame limit.
        options: OCR bar and limits.

    Returns:
        Paragraph elements of the pages that pass the bar, page numbers from
        1, ``pages_for_review`` and ``ocr_confidence``.

    Raises:
        TooLargeError: a frame above ``options.max_pixels`` (refused before
            decoding), or more than ``max_pages`` frames.
        UnsupportedFormatError: Pillow does not recognise the bytes.
        CorruptDocumentError: truncated or undecodable image data.
        OcrBelowBarError: every non-blank page is below the bar.
        NoTextError: every page is blank.
        ConfigurationError: Tesseract is not installed.
    """
    from ragsync.errors import NoTextError, OcrBelowBarError

    opts = options or OcrOptions()
    n = image_frame_count(data, max_pixels=opts.max_pixels)
    if n > max_pages:
        raise TooLargeError(f"image has {n} pages, above the limit of {max_pages}")
    results = ocr_pages(iter_image_pages(data, max_pixels=opts.max_pixels), n, opts)
    elements, review, conf = assemble(results)
    if not elements:
        if review:
            raise OcrBelowBarError(
                f"all {len(review)} non-blank page(s) below the OCR bar "
                f"(confidence >= {opts.min_confidence:g}, coverage >= {opts.min_coverage:g})"
            )
        raise NoTextError(f"image holds no legible text ({n} blank page(s))")
    return OcrRawParse(elements, n, {}, pages_for_review=review, ocr_confidence=conf)


def char_error_rate(hypothesis: str, reference: str) -> float:
    """Character error rate: Levenshtein distance / reference length, whitespace runs collapsed.

    Both strings have every run of whitespace turned into one space and are
    stripped first (line breaks are layout, not content).

    Args:
        hypothesis: OCR output.
        reference: ground truth.

    Returns:
        ``edits / len(reference)`` (``len(hypothesis)``-based 0/1 when the
        reference is empty).
    """
    hyp = _WS.sub(" ", hypothesis).strip()
    ref = _WS.sub(" ", reference).strip()
    if not ref:
        return 0.0 if not hyp else 1.0
    a = np.frombuffer(hyp.encode("utf-32-le"), dtype=np.uint32)
    b = np.frombuffer(ref.encode("utf-32-le"), dtype=np.uint32)
    cols = np.arange(len(b) + 1, dtype=np.int64)
    prev = cols.copy()
    for i, ch in enumerate(a, start=1):
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, prev[:-1] + (b != ch))
        # insertions: cur[j] = min(cur[j], cur[j-1] + 1), as one running minimum
        cur = np.minimum.accumulate(cur - cols) + cols
        prev = cur
    return float(prev[-1]) / len(ref)


# --------------------------------------------------------------------------- PDF pages


def page_image_area(page: Any, page_area: float) -> float:
    """Fraction of a PDF page's area covered by image objects (forms searched 2 levels deep).

    Call under ``PDFIUM_LOCK``.

    Args:
        page: a ``pypdfium2.PdfPage``.
        page_area: the page's area in points squared.

    Returns:
        0-1 (boxes are summed, so overlaps count twice, capped at 1).
    """
    import pypdfium2.raw as pdfium_c

    if page_area <= 0:
        return 0.0
    area = 0.0
    for i, obj in enumerate(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
        if i >= _MAX_OBJECTS_SCANNED:
            break
        try:
            left, bottom, right, top = obj.get_bounds()
        except Exception:  # noqa: BLE001 - an object without bounds adds nothing
            continue
        area += max(right - left, 0.0) * max(top - bottom, 0.0)
        if area >= page_area:
            return 1.0
    return area / page_area


def page_needs_ocr(page: Any, text_chars: int) -> bool:
    """Whether a PDF page should be OCR'd: little text layer and images over >= 5% of the page.

    Call under ``PDFIUM_LOCK``.

    Args:
        page: a ``pypdfium2.PdfPage``.
        text_chars: non-blank characters in the page's text layer.

    Returns:
        True when ``text_chars < MIN_TEXT_LAYER_CHARS`` and images cover at
        least 5% of the page.
    """
    if text_chars >= MIN_TEXT_LAYER_CHARS:
        return False
    w, h = page.get_size()
    return page_image_area(page, w * h) >= _MIN_IMAGE_AREA


def _check_images(page: Any, index: int, max_pixels: int) -> None:
    import pypdfium2.raw as pdfium_c

    for i, obj in enumerate(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
        if i >= _MAX_OBJECTS_SCANNED:
            return
        try:
            w, h = obj.get_px_size()
        except Exception:  # noqa: BLE001
            continue
        if w * h > max_pixels:
            raise TooLargeError(
                f"PDF page {index + 1} holds a {w}x{h} image "
                f"({w * h} pixels, above the limit of {max_pixels})"
            )


def render_pdf_page(doc: Any, index: int, options: OcrOptions) -> PageImage:
    """Render one PDF page to grayscale at 300 dpi (less for huge pages).

    Takes ``PDFIUM_LOCK`` itself.

    Args:
        doc: an open ``pypdfium2.PdfDocument``.
        index: 0-based page index.
        options: ``max_pixels`` (image objects) and ``max_render_pixels``.

    Returns:
        The page image, numbered ``index + 1``, with the dpi it was rendered at.

    Raises:
        TooLargeError: an image object above ``options.max_pixels`` (refused
            before PDFium decodes it).
    """
    from ragsync.parsing.pdf import PDFIUM_LOCK

    with PDFIUM_LOCK:
        page = doc[index]
        try:
            _check_images(page, index, options.max_pixels)
            w, h = page.get_size()
            scale = RENDER_DPI / 72.0
            if w * h * scale * scale > options.max_render_pixels:
                scale = (options.max_render_pixels / max(w * h, 1.0)) ** 0.5
            bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=True)
            try:
                arr = bitmap.to_numpy()
                gray = np.array(arr[:, :, 0] if arr.ndim == 3 else arr, dtype=np.uint8, copy=True)
            finally:
                bitmap.close()
        finally:
            page.close()
    return PageImage(index + 1, gray, int(round(scale * 72)))


def ocr_pdf_pages(data: bytes, indices: Sequence[int], options: OcrOptions | None = None) -> list[PageOcr]:
    """Render and OCR the given pages of a PDF (rendering is serial, OCR parallel).

    Args:
        data: the PDF bytes (already known to open).
        indices: 0-based page indices.
        options: OCR bar and limits.

    Returns:
        One ``PageOcr`` per index, sorted by page.

    Raises:
        TooLargeError: a page holds an image above ``options.max_pixels``.
        CorruptDocumentError: PDFium cannot reopen the file.
        ConfigurationError: Tesseract is not installed.
    """
    import pypdfium2 as pdfium

    from ragsync.parsing.pdf import PDFIUM_LOCK

    opts = options or OcrOptions()
    if not indices:
        return []
    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise CorruptDocumentError(f"PDFium cannot open the file: {exc}") from exc
    try:
        return ocr_pages((render_pdf_page(doc, i, opts) for i in indices), len(indices), opts)
    finally:
        with PDFIUM_LOCK:
            doc.close()


def pdf_needs_ocr(data: bytes, *, pages: int = 3) -> bool:
    """Quick look: does one of the first pages of a PDF need OCR (see ``page_needs_ocr``)?

    Args:
        data: PDF bytes.
        pages: how many leading pages to look at.

    Returns:
        True when one of them has under 50 characters of text layer and
        images covering >= 5% of it; False otherwise, and for files PDFium
        cannot open (the parser reports those).
    """
    import pypdfium2 as pdfium

    from ragsync.parsing.pdf import PDFIUM_LOCK

    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except Exception:  # noqa: BLE001 - encrypted/corrupt: the parser says why
            return False
        try:
            for index in range(min(len(doc), pages)):
                try:
                    page = doc[index]
                except Exception:  # noqa: BLE001
                    continue
                try:
                    textpage = page.get_textpage()
                    n = textpage.count_chars()
                    # pdfium counts spaces and line breaks too: only short pages need a closer look
                    small = n < 2 * MIN_TEXT_LAYER_CHARS
                    text = textpage.get_text_range(0, n) if small and n > 0 else ""
                    textpage.close()
                    if small and page_needs_ocr(page, len(_WS.sub("", text))):
                        return True
                finally:
                    page.close()
        finally:
            doc.close()
    return False


__all__ = [
    "DEFAULT_MIN_CONFIDENCE",
    "DEFAULT_MIN_COVERAGE",
    "OcrOptions",
    "OcrRawParse",
    "PageImage",
    "PageOcr",
    "assemble",
    "char_error_rate",
    "image_frame_count",
    "ink_mask",
    "iter_image_pages",
    "ocr_page",
    "ocr_pages",
    "ocr_pdf_pages",
    "page_needs_ocr",
    "parse_image",
    "pdf_needs_ocr",
    "render_pdf_page",
]
