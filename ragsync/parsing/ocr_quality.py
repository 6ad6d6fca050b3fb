"""OCR quality measures: ink on a page image, coverage of ink by word boxes, denoising, CER.

Mean word confidence alone misses the worst OCR failure: on a bad scan
Tesseract drops whole regions while the confidence of the words it does keep
stays at 80+. So every page also gets a *coverage*: the fraction of the page's
text-like ink (pixels clearly darker than the paper, in components the size
of letters) that lies inside recognised word boxes. Pure numpy (OpenCV for
connected components and filters); nothing here runs Tesseract.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

GrayImage = NDArray[np.uint8]

# Ink below this fraction of the page: nothing legible, the page is blank (Tesseract is not run).
BLANK_INK = 0.0001
# No word recognised and ink below this fraction: specks and dust, still a blank page.
SPECK_INK = 0.005
_BOX_PAD = 2

_WS = re.compile(r"\s+")


def ink_threshold(gray: GrayImage) -> tuple[int, float]:
    """Gray level below which a pixel is ink, and the share of the page that is ink.

    Ink is darker than both Otsu's threshold and the paper (the 90th
    percentile brightness) minus 60 levels; the second condition keeps
    scanner noise on a blank page (where Otsu's threshold falls inside the
    noise) from counting as ink. One histogram pass (every other row of
    pages above 2 megapixels), no mask.

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        ``(threshold, ink_fraction)``: ink is ``gray < threshold``.
    """
    # every other row of a large page: the same histogram shape at half the cost
    sample = gray[::2] if gray.size > 2_000_000 else gray
    hist = np.bincount(sample.ravel(), minlength=256).astype(np.float64)
    total = hist.sum()
    if total == 0:
        return 0, 0.0
    levels = np.arange(256, dtype=np.float64)
    w0 = np.cumsum(hist)
    m0 = np.cumsum(hist * levels)
    w1 = total - w0
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (m0[-1] * w0 / total - m0) ** 2 / (w0 * w1)
    between = np.nan_to_num(between)
    otsu = int(np.argmax(between)) + 1
    paper = int(np.searchsorted(w0, 0.9 * total))
    threshold = min(otsu, paper - 60)
    if threshold <= 0:
        return 0, 0.0
    return threshold, float(w0[threshold - 1] / total)


def ink_mask(gray: GrayImage) -> NDArray[np.bool_]:
    """Pixels that are ink (see ``ink_threshold``).

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        Boolean mask of the same shape.
    """
    return gray < ink_threshold(gray)[0]


# Resolution normalisation (``upscale_factor``): Tesseract reads letters best
# at a height of ~20 px or more (a 10-12 pt body text at 300 dpi gives 15-23 px,
# measured on the corpus's tesseract-test pages). A page whose median glyph is
# under MIN_GLYPH_PX (a 150 dpi or coarser scan) is scaled up so that it reaches
# TARGET_GLYPH_PX, by at most MAX_UPSCALE, when ``OcrOptions.normalise_resolution``
# is on (off by default: see there and benchmarks/README.md, eval_second_ocr.py).
MIN_GLYPH_PX = 12.0
TARGET_GLYPH_PX = 20.0
MAX_UPSCALE = 4.0
# With normalisation off (the default) a page with small glyphs is read again scaled up
# (``upscale_factor``) only when Tesseract reads it as it came at a mean confidence under this, and
# the better reading is kept (``ocr_engine.ocr_page``). Measured (benchmarks/README.md, sixth stop):
# the 100 and 150 dpi rescans are read at 78-95 (scaling them up lowered no CER), the 75 dpi scans
# that Tesseract misreads (CER 0.15-0.71) at 55-68, a rendered 75 dpi page (tests/test_ocr.py) at 76.
SMALL_GLYPH_CONFIDENCE = 72.0


def glyph_height(ink: NDArray[np.bool_]) -> float:
    """Median height in pixels of the page's letter-like ink components.

    A component counts when it is 3 px or more tall, at most 5 % of the page
    height, at most four times as wide as tall and has 4 or more pixels
    (rules, photos, specks and joined words are left out).

    Args:
        ink: the page's ink mask.

    Returns:
        The median height, 0.0 when no component counts.
    """
    import cv2

    _, _, stats, _ = cv2.connectedComponentsWithStats(ink.astype(np.uint8), connectivity=8)
    h = stats[1:, cv2.CC_STAT_HEIGHT]
    w = stats[1:, cv2.CC_STAT_WIDTH]
    keep = (h >= 3) & (h <= 0.05 * ink.shape[0]) & (w <= 4 * h) & (stats[1:, cv2.CC_STAT_AREA] >= 4)
    return float(np.median(h[keep])) if keep.any() else 0.0


def upscale_factor(height: float) -> float:
    """How much to scale a page up before OCR, from its median glyph height (pure).

    Args:
        height: ``glyph_height`` of the page (0.0: unknown).

    Returns:
        1.0 when the height is unknown or at least ``MIN_GLYPH_PX``, else
        ``TARGET_GLYPH_PX / height`` capped at ``MAX_UPSCALE``.
    """
    if height <= 0.0 or height >= MIN_GLYPH_PX:
        return 1.0
    return min(TARGET_GLYPH_PX / height, MAX_UPSCALE)


# Pre-processing of degraded scans (``preprocessing``, measured in benchmarks/README.md, sixth stop).
# Speckle: isolated specks (ink components of 1-2 px with no other ink within 3 px) per 1000 pixels.
# Clean scans and renders measure 0.0-0.09 (the transcribed pages at 300/150/100 dpi), PubTabNet table
# crops 0.0-6.0 (small print breaks into specks near letters), pages with salt-and-pepper noise 11-17:
# from SPECKS_PER_1000 up a page is median-filtered (``despeckle``) before Tesseract reads it.
SPECKS_PER_1000 = 8.0
# Uneven light: the paper level (90th percentile brightness) of the page's 8 x 8 tiles, 10th to 90th
# percentile of the tiles. Clean pages 0 (photos aside: a tile that is all photo has no paper), a
# shadowed photo of a page 67-106: from PAPER_SPREAD up the background is flattened (``flatten``).
PAPER_SPREAD = 40.0
_TILES = 8


def speck_density(gray: GrayImage, threshold: int) -> float:
    """Isolated specks per 1000 pixels: ink components (``gray < threshold``)
    of at most 2 pixels with no larger ink component within 3 pixels.

    Args:
        gray: 8-bit grayscale pixels.
        threshold: from ``ink_threshold``.

    Returns:
        Specks per 1000 pixels (0.0 for an empty image).
    """
    import cv2

    if gray.size == 0:
        return 0.0
    ink = (gray < threshold).astype(np.uint8)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    tiny = np.zeros(n, dtype=bool)
    tiny[1:] = stats[1:, cv2.CC_STAT_AREA] <= 2
    larger = (ink > 0) & ~tiny[labels]
    near = cv2.dilate(larger.astype(np.uint8), np.ones((7, 7), dtype=np.uint8)) > 0
    isolated = (tiny[labels] & ~near).astype(np.uint8)
    count = cv2.connectedComponents(isolated, connectivity=8)[0] - 1
    return 1000.0 * count / gray.size


def paper_spread(gray: GrayImage) -> float:
    """How unevenly the paper is lit: the spread (10th to 90th percentile) of
    the paper level (90th percentile brightness) of the page's 8 x 8 tiles.

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        Gray levels, 0.0 for an evenly lit page (or one too small to tile).
    """
    h, w = gray.shape
    if h < _TILES or w < _TILES:
        return 0.0
    step = gray[::2, ::2] if gray.size > 2_000_000 else gray
    sh, sw = step.shape
    levels = [
        float(
            np.percentile(
                step[i * sh // _TILES : (i + 1) * sh // _TILES, j * sw // _TILES : (j + 1) * sw // _TILES], 90
            )
        )
        for i in range(_TILES)
        for j in range(_TILES)
    ]
    return float(np.percentile(levels, 90) - np.percentile(levels, 10))


def preprocessing(specks: float, spread: float) -> tuple[str, ...]:
    """The pre-processing steps a page gets before Tesseract reads it, from
    its measured properties (pure).

    Args:
        specks: ``speck_density`` of the page.
        spread: ``paper_spread`` of the page.

    Returns:
        ``"despeckle"`` when ``specks >= SPECKS_PER_1000``, then ``"flatten"``
        when ``spread >= PAPER_SPREAD``, in that order; ``()`` for a clean page.
    """
    steps: list[str] = []
    if specks >= SPECKS_PER_1000:
        steps.append("despeckle")
    if spread >= PAPER_SPREAD:
        steps.append("flatten")
    return tuple(steps)


def despeckle(gray: GrayImage) -> GrayImage:
    """``gray`` through a 3 x 3 median filter (removes salt-and-pepper specks).

    Args:
        gray: 8-bit grayscale pixels.

    Returns:
        A new image of the same shape.
    """
    import cv2

    return np.ascontiguousarray(cv2.medianBlur(np.ascontiguousarray(gray), 3))


def flatten(gray: GrayImage, letter: float) -> GrayImage:
    """``gray`` divided by its background: the page with the darker text
    taken out (a grey closing with a square of three letter heights, at least
    15 px, smoothed), so that paper in shadow and paper in light both turn white.

    Args:
        gray: 8-bit grayscale pixels.
        letter: ``glyph_height`` of the page (0.0: unknown).

    Returns:
        A new image of the same shape, paper near 255.
    """
    import cv2

    size = max(15, int(3 * letter)) | 1
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (size, size))
    background = cv2.morphologyEx(gray, cv2.MORPH_CLOSE, kernel)
    background = cv2.GaussianBlur(background, (0, 0), size / 2)
    out = gray.astype(np.float32) * 255.0 / np.maximum(background.astype(np.float32), 1.0)
    return np.ascontiguousarray(np.clip(out, 0, 255).astype(np.uint8))


def _pool_factor(pixels: int, dpi: int) -> int:
    if pixels > 4_000_000 and (dpi or 300) >= 250:
        return 4  # letters of a 300 dpi page stay ~8 px tall; words stay apart
    return 2 if pixels > 2_000_000 else 1


def page_text_ink(gray: GrayImage, threshold: int, dpi: int) -> tuple[NDArray[np.bool_], int]:
    """Text-like ink of a page image, measured on a min-pooled copy (see ``text_ink``).

    Pooling the darkest pixel of each block and then thresholding gives the
    same mask as pooling the full-size ink mask, at a fraction of the cost:
    pages above 4 megapixels at 250 dpi or more are pooled 4x4, above 2
    megapixels 2x2.

    Args:
        gray: 8-bit grayscale pixels.
        threshold: from ``ink_threshold``.
        dpi: resolution of ``gray`` (0: assume 300).

    Returns:
        ``(mask, factor)``: the text-ink mask, pooled by ``factor``.
    """
    factor = _pool_factor(gray.size, dpi)
    if factor > 1:
        h, w = (gray.shape[0] // factor) * factor, (gray.shape[1] // factor) * factor
        rows = gray[:h:factor, :w]
        for k in range(1, factor):  # strided minimum: ~20x faster than reshape(...).min(axis)
            rows = np.minimum(rows, gray[k:h:factor, :w])
        pooled = rows[:, ::factor]
        for k in range(1, factor):
            pooled = np.minimum(pooled, rows[:, k::factor])
        gray = pooled
    return _text_components(gray < threshold, (dpi or 300) / factor), factor


def text_ink(ink: NDArray[np.bool_], dpi: int) -> tuple[NDArray[np.bool_], int]:
    """Ink that looks like text: connected components at most 0.4 in tall and 2 in wide.

    Photos, rules, table grids, big logos and solid fills form larger
    components and are left out, so a page with a picture is not mistaken
    for one where Tesseract missed text. The mask is OR-pooled 2x2 first on
    pages above 2 megapixels (4x less work, same geometry).

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
    return _text_components(ink, (dpi or 300) / factor), factor


def _text_components(ink: NDArray[np.bool_], res: float) -> NDArray[np.bool_]:
    """Keep the connected components (8-connected) of ``ink`` at most 0.4 in
    tall and 2 in wide (``res`` px per inch). OpenCV's labelling, already
    loaded for the page's other steps: scipy's costs a parse process ~0.5
    CPU-s to import (benchmarks/README.md, scans that generalize)."""
    import cv2

    n, labels, stats, _ = cv2.connectedComponentsWithStats(ink.astype(np.uint8), connectivity=8)
    if n <= 1:
        return ink
    keep = (stats[:, cv2.CC_STAT_HEIGHT] <= 0.4 * res) & (stats[:, cv2.CC_STAT_WIDTH] <= 2.0 * res)
    keep[0] = False
    return keep[labels]


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
    return edit_distance(a, b) / len(ref)


def edit_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Levenshtein distance between two 1-D integer arrays (characters,
    token ids): insertions, deletions and substitutions cost 1 each; one
    row of the table at a time (numpy). Empty arrays are allowed."""
    cols = np.arange(len(b) + 1, dtype=np.int64)
    prev = cols.copy()
    for i, item in enumerate(a, start=1):
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, prev[:-1] + (b != item))
        # insertions: cur[j] = min(cur[j], cur[j-1] + 1), as one running minimum
        prev = np.minimum.accumulate(cur - cols) + cols
    return int(prev[-1])
