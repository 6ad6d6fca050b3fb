"""Plumbing the ``ragsync`` command modules share (``beam_pipelines.cli`` and
its plugins ``cli_sync``, ``cli_stream``, ``cli_reembed``): settings from the
flags, the output of a command, comma-separated lists.

It imports no command module, so every one of them can import it.
"""

from __future__ import annotations

import argparse
import json
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
