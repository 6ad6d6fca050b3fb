"""The one lock around PDFium, shared by every module that calls it.

PDFium is not thread-safe: every call into it (opening, loading pages, text,
rendering, closing) runs under this process-wide re-entrant lock. It lives in
its own module so the PDF parser and the OCR of scanned pages share it
without importing each other.
"""

from __future__ import annotations

import threading

PDFIUM_LOCK = threading.RLock()

__all__ = ["PDFIUM_LOCK"]
