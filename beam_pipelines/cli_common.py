"""Plumbing the ``ragsync`` command modules share (``beam_pipelines.cli`` and
its plugins ``cli_sync``, ``cli_stream``, ``cli_reembed``): settings from the
flags, the output of a command, comma-separated lists.

It imports no command module, so every one of them can import it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ragsync.display import safe_text


def settings_from_args(args: argparse.Namespace) -> Any:
    """Settings from the command's flags, then the pipeline options after
    ``--`` (``--es_api_key=...``), then ``RAGSYNC_*`` variables, then the
    defaults (``ragsync.options``).

    Raises:
        ConfigurationError: a value that is not valid for its option.
    """
    from ragsync.options import option_values, setting_names, settings_from

    flags = {name: getattr(args, name, None) for name in setting_names()}
    return settings_from(option_values(flags, getattr(args, "pipeline_values", None)))


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """A command's result on stdout: ``data`` as one JSON document with
    ``--json``, else the ``human`` text (control characters made visible)."""
    if args.json:
        print(json.dumps(data, sort_keys=True, default=str))
    else:
        print(safe_text(human, keep_newlines=True))


def split_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (a comma-separated flag)."""
    return [g.strip() for g in text.split(",") if g.strip()]


def fail(message: object, code: int, *, prog: str = "ragsync") -> int:
    """Print ``prog: message`` to stderr (control characters made visible);
    returns ``code``, the command's exit code."""
    print(safe_text(f"{prog}: {message}"), file=sys.stderr)
    return code


def add_run_flags(
    parser: argparse.ArgumentParser, *, beam_help: str = "after --: Beam pipeline options"
) -> None:
    """The flags of every command that runs a pipeline: ``--quiet`` (no
    progress lines on stderr) and, as its last positional, ``beam_args``
    (what follows ``--``: Beam's pipeline options)."""
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("beam_args", nargs="*", help=beam_help)
