"""The Tesseract command-line tool: where it is, which languages it has, one run on one image.

One ``tesseract FILE stdout tsv`` process reads one page image from a
temporary file (the image file's own bytes when Tesseract decodes them to the
same pixels, else an uncompressed TIFF or a PBM: ``tesseract_input``), with
``OMP_THREAD_LIMIT=1`` (Tesseract's own OpenMP threading makes a page ~5x
slower on a busy machine) and a time limit in CPU seconds (``prlimit --cpu``;
``timeout -s KILL`` ends a run that hangs at ``WALL_FACTOR`` times it).
What to read and how to judge it is ``ragsync.parsing.ocr_engine``'s.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from ragsync.errors import ConfigurationError
from ragsync.parsing.ocr_quality import GrayImage

DEFAULT_PAGE_TIMEOUT_S = 120.0
# The time limit of a run is CPU seconds (``prlimit --cpu``); the wall-clock limit, for a run that
# hangs without using CPU, is this many times longer. A wall-clock limit alone dropped 300 dpi pages
# whose reading takes ~5 CPU-s on a machine loaded ~18 deep (benchmarks/README.md, scans that generalize).
WALL_FACTOR = 10.0

_TESSERACT_LOCK = threading.Lock()
_installed_languages: frozenset[str] | None = None
_tesseract_path: str | None = None


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


def installed_languages() -> frozenset[str]:
    """The languages Tesseract has traineddata for (``tesseract --list-langs``),
    read once per process.

    Raises:
        ConfigurationError: Tesseract is not installed, or does not answer.
    """
    global _installed_languages
    with _TESSERACT_LOCK:
        known = _installed_languages
    if known is None:
        try:
            proc = subprocess.run(
                [tesseract_path(), "--list-langs"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=tesseract_env(),
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ConfigurationError(f"tesseract --list-langs failed: {exc}") from exc
        lines = proc.stdout.decode("utf-8", "replace").splitlines()
        known = frozenset(li.strip() for li in lines[1:] if li.strip())  # after "List of available languages"
        with _TESSERACT_LOCK:
            _installed_languages = known
    return known


def check_languages(lang: str) -> None:
    """Refuse a language list naming a language Tesseract does not have.

    Args:
        lang: languages joined by ``+`` (``OcrOptions.lang``).

    Raises:
        ConfigurationError: one is missing; the message names the Debian
            package that adds it and the languages installed.
    """
    missing = [name for name in lang.split("+") if name not in installed_languages()]
    if missing:
        have = ", ".join(sorted(installed_languages())) or "none"
        packages = " ".join(f"tesseract-ocr-{name.replace('_', '-')}" for name in missing)
        raise ConfigurationError(
            f"OCR language(s) {', '.join(missing)} not installed (installed: {have}): "
            f"install them (apt-get install {packages}) or change ocr_languages ($RAGSYNC_OCR_LANGUAGES)"
        )


def tesseract_input(gray: GrayImage) -> bytes:
    """Encode a page image the way Tesseract reads it fastest from a file.

    Bilevel pages (only 0 and 255) go as PBM: Tesseract skips its own
    thresholding (~8% less CPU on a 300 dpi page). Grayscale pages go as an
    uncompressed TIFF: ~0.03 s to write and ~0.004 s for leptonica to read an
    8-megapixel page, where a PNG (level 1) cost ~0.09 s + 0.03 s and binary
    PGM ~0.11 s to read (leptonica reads it a byte at a time; measured in
    ``benchmarks/PARSING.md``). Tesseract reads the same pixels either way.

    Args:
        gray: ``(height, width)`` uint8 array.

    Returns:
        PBM (``P4``) or TIFF file bytes.
    """
    h, w = gray.shape
    arr = np.ascontiguousarray(gray, dtype=np.uint8)
    if not np.any((arr != 0) & (arr != 255)):
        return b"P4\n%d %d\n" % (w, h) + np.packbits(arr == 0, axis=1).tobytes()
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="TIFF")  # uncompressed, min-is-black
    return buf.getvalue()


def run_tesseract(
    gray: GrayImage,
    psm: int,
    dpi: int,
    *,
    lang: str = "eng",
    timeout_s: float = DEFAULT_PAGE_TIMEOUT_S,
    source: bytes | None = None,
    tsv: bool = True,
    with_stderr: bool = False,
) -> str:
    """Run Tesseract on one image and return its TSV output (plain when ``tsv`` is False).

    The image goes to Tesseract as a temporary file, removed afterwards:
    ``source`` (file bytes Tesseract decodes to ``gray``) as it is, else
    ``tesseract_input(gray)``. A file, not stdin: Tesseract reads stdin a
    byte at a time (~17 ns a byte, 0.15 CPU-s for an uncompressed
    8-megapixel page). ``with_stderr`` appends Tesseract's stderr (where
    ``--psm 0`` prints its orientation report).

    Raises:
        TimeoutError: past ``timeout_s`` CPU seconds (or ``WALL_FACTOR``
            times that of wall-clock time).
        RuntimeError: Tesseract exited with an error.
    """
    lang = "osd" if psm == 0 else lang  # OSD with -l eng misreads 180-degree pages
    with tempfile.NamedTemporaryFile(prefix="ragsync-ocr-", delete=False) as image:
        image.write(source if source is not None else tesseract_input(gray))
    try:
        return _run_tesseract_file(image.name, psm, dpi, lang, timeout_s, tsv=tsv, with_stderr=with_stderr)
    finally:
        os.unlink(image.name)


def _run_tesseract_file(
    path: str, psm: int, dpi: int, lang: str, timeout_s: float, *, tsv: bool, with_stderr: bool
) -> str:
    """Run Tesseract on the image file ``path`` (see ``run_tesseract``)."""
    cmd = [tesseract_path(), path, "stdout", "--psm", str(psm), "-l", lang]
    if dpi > 0:
        cmd += ["--dpi", str(dpi)]
    if tsv:
        cmd.append("tsv")
    limit = shutil.which("prlimit")
    if limit:  # the limit is CPU time: a page on a busy machine is not cut short by waiting for a core
        cmd = [limit, f"--cpu={max(int(timeout_s), 1)}", *cmd]
    wall = timeout_s * (WALL_FACTOR if limit else 1)
    killer = shutil.which("timeout")
    if killer:  # the page dies on time even if this process is killed first
        cmd = [killer, "-s", "KILL", f"{wall:.0f}", *cmd]
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=tesseract_env(),
            timeout=wall + 5,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"tesseract ran past {timeout_s:.0f} s") from exc
    # KILL (the wall limit, or the CPU limit's hard end) or XCPU (the CPU limit), direct or through timeout
    if proc.returncode in (137, -9, 152, -24):
        raise TimeoutError(f"tesseract ran past {timeout_s:.0f} s")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"tesseract exited {proc.returncode}: {err[-1] if err else ''}")
    out = proc.stdout.decode("utf-8", "replace")
    return out + "\n" + proc.stderr.decode("utf-8", "replace") if with_stderr else out


def orientation(gray: GrayImage, dpi: int, timeout_s: float = DEFAULT_PAGE_TIMEOUT_S) -> int:
    """Clockwise rotation (0/90/180/270) that makes the page upright, by Tesseract's OSD.

    Returns 0 when OSD is unsure (orientation confidence < 2) or fails.
    """
    try:
        out = run_tesseract(gray, 0, dpi, timeout_s=timeout_s, tsv=False, with_stderr=True)
    except (TimeoutError, RuntimeError, OSError):
        return 0
    rotate = re.search(r"^Rotate:\s*(\d+)", out, re.M)
    conf = re.search(r"^Orientation confidence:\s*([\d.]+)", out, re.M)
    if not rotate or not conf or float(conf.group(1)) < 2.0:
        return 0
    angle = int(rotate.group(1)) % 360
    return angle if angle in (90, 180, 270) else 0
