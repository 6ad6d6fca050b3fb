"""A test plug-in (setting ``plugins``): the parse of a document whose file
name contains ``hang`` never ends on its own (it sleeps an hour in the parse
child, until the parse time limit ends the child).

``tests/test_parse_isolation.py`` names it in ``RAGSYNC_PLUGINS``; the CLI
imports it at start, and each parse child when it unpickles its settings
(``ragsync.config.Settings.__setstate__``). With it the time limit can be
generous (no ordinary document comes near it, whatever the machine's load)
and the hanging document still never finishes (whatever the machine's speed):
the test asserts what the limit did, not how fast anything ran.
"""

from __future__ import annotations

import time
from typing import Any

import transforms.parse as parse_step

HANG_S = 3600.0


def _parse_or_hang(data: bytes, mime: str, *, filename: str = "", **kwargs: Any) -> Any:
    if "hang" in filename:
        time.sleep(HANG_S)
    return _PARSE(data, mime, filename=filename, **kwargs)


if parse_step.parse is not _parse_or_hang:  # importing it again changes nothing
    _PARSE = parse_step.parse
    parse_step.parse = _parse_or_hang
