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


# An absolute file path (not the path part of a URL: a '/' after a word
# character, ':' or '/' is not a start), a file:// URI, a process id.
_HOST_PATH = re.compile(r"file://\S+|(?<![\w:/.~-])~?/[^\s'\"(),;]+")
_PIDS = re.compile(r"\b(?:process(?:\(es\))?|pids?)[\s:=#]*\d+(?:\s*,\s*\d+)*", re.IGNORECASE)


def host_free(text: object) -> str:
    """``text`` without host details, for messages a tenant reads (a sync's
    error, a pause reason): absolute paths and ``file://`` URIs become
    ``<path>``, process ids ``<process>``. URLs keep their path.

    >>> host_free("cannot open Milvus Lite at '/srv/home/milvus.db': process(es) 41, 42 hold it")
    "cannot open Milvus Lite at '<path>': <process> hold it"
    """
    return _PIDS.sub("<process>", _HOST_PATH.sub("<path>", str(text)))
