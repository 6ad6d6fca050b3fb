"""Text from tenants made safe to print on a terminal.

File names, document text, URIs and error messages come from tenants; printed
raw, an escape sequence in them could rewrite the operator's terminal (move
the cursor, hide lines, set the window title) and bidirectional overrides can
make a name read differently from what it is. Every human-readable line the
command line prints passes through :func:`safe_text`; ``--json`` output is
already escaped by the JSON encoder.
"""

from __future__ import annotations

import re

# C0 and C1 controls (ESC, BEL, CR, ...) and the bidi/zero-width formatting
# characters that change how the rest of a line reads.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def safe_text(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control or formatting character shown as an
    escape (``\\x1b``, ``\\u202e``); newlines kept only when asked."""

    def escape(match: re.Match[str]) -> str:
        ch = match.group(0)
        if keep_newlines and ch == "\n":
            return ch
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    value = str(text)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from undecodable file names
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return _UNSAFE.sub(escape, value)


def shorten(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters at a word boundary, ending
    in an ellipsis when cut (a line of ``status`` never ends mid-word).

    A first word longer than the width (a long path) is cut inside it: a
    line still shows what it can.

    >>> shorten("neither PDFium nor pdfminer could open it", 24)
    'neither PDFium nor…'
    >>> shorten("short", 24)
    'short'
    """
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    space = cut.rstrip().rfind(" ")
    if space > 0:
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


# An absolute file path (not the path part of a URL: a '/' after a word
# character, ':' or '/' is not a start), a file:// URI, a process id. Neither
# takes a quote, bracket or separator after it, nor the punctuation that ends
# the sentence: ``'file:///x/y'.`` becomes ``'<path>'.``, its quotes kept.
_STOP = r"\s'\"(),;<>\[\]{}"
_HOST_PATH = re.compile(rf"(?:file://|(?<![\w:/.~-])~?/)[^{_STOP}]+?(?=[.:!?]*(?:[{_STOP}]|$))")
_PIDS = re.compile(r"\b(?:process(?:\(es\))?|pids?)[\s:=#]*\d+(?:\s*,\s*\d+)*", re.IGNORECASE)


def host_free(text: object) -> str:
    """``text`` without host details, for messages a tenant reads (a sync's
    error, a pause reason): absolute paths and ``file://`` URIs become
    ``<path>``, process ids ``<process>``. URLs keep their path.

    >>> host_free("cannot open Milvus Lite at '/srv/home/milvus.db': process(es) 41, 42 hold it")
    "cannot open Milvus Lite at '<path>': <process> hold it"
    """
    return _PIDS.sub("<process>", _HOST_PATH.sub("<path>", str(text)))


def progress_line(phase: str, unit: str, done: int, elapsed_s: float, total: int | None) -> str:
    """The progress line of a phase that has ``done`` items after ``elapsed_s``.

    Args:
        phase, unit: shown as ``[phase] N unit``.
        done: items counted so far.
        elapsed_s: seconds since the phase started.
        total: the items expected, or None (or 0) while not known (a backfill's
            listing has not finished).

    Returns:
        Under a second in, only the count (``[write] 3/10 docs``: too early
        for a rate). Then, with a total: count, percent (floored, at most 100),
        rate and ETA (``[write] 3/10 docs 30% 1.5 docs/s ETA 5s``); without
        one, count and rate (``[write] 3 docs 1.5 docs/s``).
    """
    count = f"{done}/{total}" if total else f"{done}"
    line = f"[{phase}] {count} {unit}"
    if elapsed_s < 1.0:
        return line
    rate = done / elapsed_s
    if not total:
        return f"{line} {rate:.1f} {unit}/s"
    percent = min(100, done * 100 // total)
    eta = max(total - done, 0) / rate if rate > 0 else 0.0
    return f"{line} {percent}% {rate:.1f} {unit}/s ETA {eta:.0f}s"


def listing_line(listed: int, elapsed_s: float, *, complete: bool, shard: str | None = None) -> str:
    """The progress line of a listing (or of one of its ``shard``s, when it
    has several): while it runs the count so far and the rate (its total is
    what it is finding out), once complete the total.

    >>> listing_line(40, 2.0, complete=False)
    '[list] 40 listed so far 20.0/s'
    >>> listing_line(55, 2.5, complete=True)
    '[list] listing complete: 55 objects in 2.5s (22.0/s)'
    >>> listing_line(12, 2.0, complete=True, shard="kb/a")
    '[list] shard kb/a listed: 12 objects in 2.0s (6.0/s)'
    """
    rate = listed / max(elapsed_s, 1e-6)
    if complete and shard is not None:
        return f"[list] shard {shard or '-'} listed: {listed} objects in {elapsed_s:.1f}s ({rate:.1f}/s)"
    if complete:
        return f"[list] listing complete: {listed} objects in {elapsed_s:.1f}s ({rate:.1f}/s)"
    where = f" (shard {shard or '-'})" if shard is not None else ""
    return f"[list] {listed} listed so far {rate:.1f}/s{where}"
