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
