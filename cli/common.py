"""Plumbing the ``ragsync`` command modules share (``cli.main`` and its
plugins ``cli.sources``, ``cli.stream``, ``cli.reembed``, ``cli.control_plane``): settings from the
flags, the output of a command, comma-separated lists.

It imports no command module, so every one of them can import it.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ragsync.ops.display import safe_text

if TYPE_CHECKING:  # loaded by the dry runs only
    from ragsync.ingest.change_plan import ChangePlan

SHARED_TITLE = "settings shared by every command (also pipeline options after --, and RAGSYNC_* variables)"


class CommandFirstFormatter(argparse.HelpFormatter):
    """Help that shows a command's own arguments first: the usage line names
    them and ends in ``[SETTINGS]``; the shared settings (marked by
    :func:`shared_parser`) are listed after them under :data:`SHARED_TITLE`."""

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any) -> str:
        own = [a for a in actions if not getattr(a, "ragsync_shared", False)]
        text = super()._format_usage(usage, own, groups, prefix)
        if usage is None and len(own) < len(actions):
            text = text.rstrip("\n") + " [SETTINGS]\n\n"
        return text


class RagsyncArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is :class:`CommandFirstFormatter`'s
    (given as the subparsers' ``parser_class``, every subcommand gets it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", CommandFirstFormatter)
        super().__init__(*args, **kwargs)


def shared_parser() -> RagsyncArgumentParser:
    """The parent parser of every subcommand: ``--home``, ``--json`` and every
    setting (``ragsync.options``), in one group shown after the command's own
    arguments."""
    from ragsync.options import add_setting_flags

    common = RagsyncArgumentParser(add_help=False)
    group = common.add_argument_group(SHARED_TITLE)
    group.add_argument(
        "--home", default=None, help="state directory (default $RAGSYNC_HOME or ./ragsync-data)"
    )
    group.add_argument("--json", action="store_true", help="print one JSON document for scripts")
    # Every setting (stores, credentials, limits): --catalog-url, --es-api-key, --max-bytes...
    add_setting_flags(group)
    for action in common._actions:
        action.ragsync_shared = True  # type: ignore[attr-defined]
    return common


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


def existing_settings(args: argparse.Namespace) -> Any:
    """:func:`settings_from_args` for a command that reads a home (query,
    status, sources, dead letters, a sync...): one run where nothing was
    indexed says so instead of creating an empty home and reporting nothing.

    Raises:
        ConfigurationError: a bad setting, or the home's catalog does not
            exist (``ragsync.config.require_catalog``).
    """
    from ragsync.config import require_catalog

    return require_catalog(settings_from_args(args))


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """A command's result on stdout: ``data`` as one JSON document with
    ``--json``, else the ``human`` text (control characters made visible)."""
    if args.json:
        print(json.dumps(data, sort_keys=True, default=str))
    else:
        print(safe_text(human, keep_newlines=True))


def emit_plan(args: argparse.Namespace, plan: ChangePlan) -> int:
    """Print a dry run's plan (``--dry-run`` of backfill and sync; ``--json``:
    its dict, else ``beam_pipelines.dry_run.format_plan``); exit code 0."""
    from beam_pipelines.dry_run import format_plan

    emit(args, plan.to_dict(), format_plan(plan))
    return 0


def split_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (a comma-separated flag)."""
    return [g.strip() for g in text.split(",") if g.strip()]


def add_run_flags(
    parser: argparse.ArgumentParser, *, beam_help: str = "after --: Beam pipeline options"
) -> None:
    """The flags of every command that runs a pipeline: ``--quiet`` (no
    progress lines on stderr) and, as its last positional, ``beam_args``
    (what follows ``--``: Beam's pipeline options)."""
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("beam_args", nargs="*", help=beam_help)
