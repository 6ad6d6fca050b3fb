"""Commands on local files, no home needed: ``ragsync parse FILE|FOLDER``
(what the pipeline's detect and parse steps make of a file, in the parse
child's bounds) and ``ragsync sample-corpus DIR``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
from typing import Any

from cli.common import emit, settings_from_args
from ragsync.errors import ConfigurationError, RagsyncError
from ragsync.ops.display import safe_text


def _page_runs(parsers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Which parser read each page, as runs ``{"first", "last", "parser"}`` of consecutive pages."""
    runs: list[dict[str, Any]] = []
    for page, parser in enumerate(parsers, start=1):
        if runs and runs[-1]["parser"] == parser and runs[-1]["last"] == page - 1:
            runs[-1]["last"] = page
        else:
            runs.append({"first": page, "last": page, "parser": parser})
    return runs


def _route_file(path: str, limits: Any) -> tuple[str, str]:
    """In ``ragsync parse``'s bounded child: the file's type and lane."""
    from ragsync.parsing import route

    with open(path, "rb") as fh:
        data = fh.read()
    return route(data, os.path.basename(path), limits)


def _parse_file(path: str, mime: str, settings: Any) -> dict[str, Any]:
    """In ``ragsync parse``'s bounded child: what the parser makes of the
    file, as ``cmd_parse`` shows it (attachments by name and size: their
    bytes stay in the child)."""
    from ragsync.parsing import parse

    with open(path, "rb") as fh:
        data = fh.read()
    result = parse(
        data,
        mime,
        filename=os.path.basename(path),
        max_bytes=settings.max_bytes,
        max_pages=settings.max_pages,
        limits=settings.archive_limits(),
        ocr_languages=settings.ocr_languages,
    )
    return {
        "attachments": [
            {"name": a.name, "bytes": len(a.data), "media_type": a.media_type, "depth": a.depth}
            for a in result.attachments
        ],
        "elements": [
            {
                "type": e.type.value,
                "text": e.text,
                "level": e.level,
                "page": e.page,
                "confidence": e.confidence,
            }
            for e in result.elements
        ],
        "pages_for_review": list(result.pages_for_review),
        "ocr_confidence": result.ocr_confidence,
        "page_parsers": _page_runs(result.page_parsers),
    }


def parse_file(path: str, settings: Any) -> dict[str, Any]:
    """What the pipeline's detect and parse steps make of one file, in a
    child process under the parse child's limits
    (``ragsync.ops.lifecycle.BoundedChild``: memory, the lane's time, the
    expansion limits), as the pipeline does: nothing of the file is decoded
    in this process. Keys: ``mime``, ``lane``, ``elements``,
    ``pages_for_review``, ``ocr_confidence``, ``page_parsers``,
    ``attachments`` and ``error`` (the dead letter's ``{"class", "message"}``
    it would get, else None).

    Raises:
        ConfigurationError: the file cannot be read (missing, no access).
    """

    from ragsync.model import Lane
    from ragsync.ops.lifecycle import BoundedChild

    if not os.access(path, os.R_OK) or not os.path.isfile(path):
        raise ConfigurationError(f"cannot read {path}: no such file, or no access")
    # The child imports the functions it runs by module name: this module
    # may be running as __main__ (``python -m cli.main``), which it cannot.
    here = importlib.import_module("cli.files")
    out: dict[str, Any] = {
        "mime": "",
        "lane": "",
        "elements": [],
        "pages_for_review": [],
        "ocr_confidence": None,
        "page_parsers": [],
        "attachments": [],
        "error": None,
    }
    try:
        with BoundedChild(settings.parse_memory_mb) as child:
            out["mime"], out["lane"] = child.call(
                here._route_file, path, settings.archive_limits(), timeout_s=settings.parse_timeout_s
            )
            slow = out["lane"] == Lane.SLOW.value
            limit = settings.slow_parse_timeout_s if slow else settings.parse_timeout_s
            out.update(child.call(here._parse_file, path, out["mime"], settings, timeout_s=limit))
    except RagsyncError as exc:
        out["error"] = {"class": exc.error_class, "message": str(exc)}
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _folder_files(folder: str) -> list[str]:
    """The files of ``folder`` a backfill of it would list: regular files
    under it (links only where they stay inside), hidden ones left out, by path."""
    from connectors.location import Location
    from connectors.reader import ContentReader

    reader = ContentReader(Location.parse(os.path.abspath(folder)))
    out = []
    for path, _ in reader.walk():
        relative = os.path.relpath(path, reader.real_root)
        if not any(part.startswith(".") for part in relative.split(os.sep)):
            out.append(os.path.join(folder, relative))
    return out


def cmd_parse(args: argparse.Namespace) -> int:
    """``ragsync parse FILE``: the file's type, lane and elements, or the dead
    letter it would be (exit 2). ``ragsync parse FOLDER``: each file a
    backfill of the folder would read, one line each (``--json``: each file's
    result under ``files``); exit 2 when any would be dead-lettered."""
    settings = settings_from_args(args)
    if os.path.isdir(args.file):
        files = [{"file": path, **parse_file(path, settings)} for path in _folder_files(args.file)]
        failed = [f for f in files if f["error"]]
        human = [
            f"{f['file']}: {f['mime'] or 'not detected'} ({f['lane']} lane) "
            + (
                f"dead letter [{f['error']['class']}]"
                if f["error"]
                else _count(len(f["elements"]), "element")
            )
            for f in files
        ]
        human.append(
            f"{_count(len(files), 'file')}: {len(files) - len(failed)} parsed, "
            f"{len(failed)} would be dead-lettered"
        )
        emit(args, {"files": files}, "\n".join(human))
        return 2 if failed else 0
    out = parse_file(args.file, settings)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        kind = f"{out['mime']} ({out['lane']} lane)" if out["mime"] else "not detected"
        print(safe_text(f"{args.file}: {kind}"))
        if out["error"]:
            print(safe_text(f"dead letter [{out['error']['class']}]: {out['error']['message']}"))
        for e in out["elements"]:
            print(f"  p{e['page']:<3d} {e['type']:9s} {e['text'][:100]!r}")
        for a in out["attachments"]:
            print(f"  attachment {a['name']!r}: {a['bytes']} bytes (child document)")
    return 2 if out["error"] else 0


def cmd_sample_corpus(args: argparse.Namespace) -> int:
    from ragsync.ops.samples import write_sample_corpus

    paths = write_sample_corpus(args.dest)
    emit(args, {"dest": args.dest, "files": paths}, f"wrote {len(paths)} sample documents to {args.dest}")
    return 0


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``parse`` and ``sample-corpus``: commands on local files, no home needed."""
    pa = sub.add_parser(
        "parse", parents=[common], help="show what the parser makes of one file (or of each file of a folder)"
    )
    pa.add_argument("file", help="a file, or a folder: one line for each file a backfill of it would read")
    pa.set_defaults(func=cmd_parse)
    sc = sub.add_parser("sample-corpus", parents=[common], help="write the generated sample documents")
    sc.add_argument("dest")
    sc.set_defaults(func=cmd_sample_corpus)
