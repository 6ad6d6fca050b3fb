"""Ruling lines of a PDF page: the horizontal and vertical strokes and rectangle edges it draws.

Tables are drawn with lines, thin filled rectangles, cell rectangles, or one
path holding the whole grid, at the top level or inside form XObjects. Every
path object's segments are walked (through forms, with their matrices) and
the axis-parallel pieces at least 3 pt long are kept; filled rectangles
contribute their edges. Call under ``PDFIUM_LOCK``. Nothing here imports Beam.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pypdfium2.raw as pdfium_c

# Work limits per page: charts and maps draw tens of thousands of segments.
_MAX_OBJECTS = 6000
_MAX_SEGMENTS = 30000
_MIN_LENGTH = 3.0
_AXIS_TOLERANCE = 1.0

Matrix = tuple[float, float, float, float, float, float]
_IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


@dataclass
class Rulings:
    """A page's axis-parallel strokes in PDF points (y up).

    Attributes:
        horizontal: ``(y, x0, x1)`` with ``x0 < x1``.
        vertical: ``(x, y0, y1)`` with ``y0 < y1``.
    """

    horizontal: list[tuple[float, float, float]] = field(default_factory=list)
    vertical: list[tuple[float, float, float]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.horizontal or self.vertical)


def _compose(inner: Matrix, outer: Matrix) -> Matrix:
    a, b, c, d, e, f = inner
    A, B, C, D, E, F = outer
    return (a * A + b * C, a * B + b * D, c * A + d * C, c * B + d * D, e * A + f * C + E, e * B + f * D + F)


def _matrix(obj: Any) -> Matrix:
    m = pdfium_c.FS_MATRIX()
    if not pdfium_c.FPDFPageObj_GetMatrix(obj, ctypes.byref(m)):
        return _IDENTITY
    return (m.a, m.b, m.c, m.d, m.e, m.f)


class _Walker:
    def __init__(self) -> None:
        self.out = Rulings()
        self.objects = 0
        self.segments = 0
        self._x = ctypes.c_float()
        self._y = ctypes.c_float()

    def edge(self, x0: float, y0: float, x1: float, y1: float) -> None:
        if abs(y1 - y0) <= _AXIS_TOLERANCE and abs(x1 - x0) >= _MIN_LENGTH:
            self.out.horizontal.append(((y0 + y1) / 2, min(x0, x1), max(x0, x1)))
        elif abs(x1 - x0) <= _AXIS_TOLERANCE and abs(y1 - y0) >= _MIN_LENGTH:
            self.out.vertical.append(((x0 + x1) / 2, min(y0, y1), max(y0, y1)))

    def path(self, obj: Any, m: Matrix) -> None:
        n = pdfium_c.FPDFPath_CountSegments(obj)
        if n <= 0:
            return
        self.segments += n
        a, b, c, d, e, f = m
        px = py = sx = sy = 0.0
        for i in range(n):
            seg = pdfium_c.FPDFPath_GetPathSegment(obj, i)
            if not pdfium_c.FPDFPathSegment_GetPoint(seg, ctypes.byref(self._x), ctypes.byref(self._y)):
                continue
            x, y = self._x.value, self._y.value
            x, y = a * x + c * y + e, b * x + d * y + f
            kind = pdfium_c.FPDFPathSegment_GetType(seg)
            if kind == pdfium_c.FPDF_SEGMENT_MOVETO:
                sx, sy = x, y
            elif kind == pdfium_c.FPDF_SEGMENT_LINETO:
                self.edge(px, py, x, y)
            if pdfium_c.FPDFPathSegment_GetClose(seg):
                self.edge(x, y, sx, sy)
            px, py = x, y
        # A thin filled rectangle is one ruling: its long edges were both kept; that is fine,
        # they snap together when rulings are clustered.

    def walk(self, count: int, get: Any, parent: Any, m: Matrix) -> None:
        for i in range(count):
            if self.objects >= _MAX_OBJECTS or self.segments >= _MAX_SEGMENTS:
                return
            obj = get(parent, i)
            self.objects += 1
            kind = pdfium_c.FPDFPageObj_GetType(obj)
            if kind == pdfium_c.FPDF_PAGEOBJ_PATH:
                self.path(obj, _compose(_matrix(obj), m))
            elif kind == pdfium_c.FPDF_PAGEOBJ_FORM:
                inner = _compose(_matrix(obj), m)
                self.walk(pdfium_c.FPDFFormObj_CountObjects(obj), pdfium_c.FPDFFormObj_GetObject, obj, inner)


def page_rulings(page: Any) -> Rulings:
    """Axis-parallel strokes of a page (top level and forms up to the work limits).

    Args:
        page: a ``pypdfium2.PdfPage``.

    Returns:
        The page's ``Rulings`` (empty when it draws no lines).
    """
    raw = page.raw
    walker = _Walker()
    walker.walk(pdfium_c.FPDFPage_CountObjects(raw), pdfium_c.FPDFPage_GetObject, raw, _IDENTITY)
    return walker.out


def turned(rulings: Rulings, turn: int) -> Rulings:
    """Rulings in the frame where text turned ``turn`` quarter turns is upright (see ``pdf_text.upright``).

    Args:
        rulings: rulings in page coordinates.
        turn: quarter turns of the page's text (0 returns ``rulings`` as is).

    Returns:
        The rulings in the upright frame.
    """
    if turn % 4 == 0:
        return rulings
    from ragsync.parsing.pdf_text import upright

    out = Rulings()
    boxes = [(x0, x1, y, y) for y, x0, x1 in rulings.horizontal]
    boxes += [(x, x, y0, y1) for x, y0, y1 in rulings.vertical]
    for box in boxes:  # (x0, x1, bottom, top) in page coordinates
        left, right, bottom, top = upright(turn, *box)
        (out.horizontal if top - bottom < right - left else out.vertical).append(
            ((bottom + top) / 2, left, right)
            if top - bottom < right - left
            else ((left + right) / 2, bottom, top)
        )
    return out
