"""``ragsync reembed``, ``ragsync reindex``, ``ragsync index-versions`` and
``ragsync eval-retrieval``.

Registered through ``PLUGIN_MODULES`` in :mod:`cli.main`. Exit
codes: 0 success (``reembed``: the new version went live, or was built
without a golden set; ``reindex``: it ran, its ``failed`` count and
``error`` say what was left behind), 1 the gate refused the new version, 2
usage or configuration error.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import add_run_flags, emit, existing_settings, split_list


def cmd_reembed(args: argparse.Namespace) -> int:
    from ragsync.embedding.models import spec_for

    settings = existing_settings(args)
    # A model name that names nothing is refused before Beam is imported
    # (seconds): run_reembed checks it again where it loads the model.
    spec_for(args.model, settings)
    from beam_pipelines.reembed import run_reembed

    summary = run_reembed(
        settings,
        args.model,
        max_docs_per_s=args.max_docs_per_s,
        tolerance=args.tolerance,
        golden=args.golden,
        groups=split_list(args.groups),
        batch_chunks=args.batch_size,
        beam_args=args.beam_args,
        show_progress=not args.quiet and not args.json,
    )
    d = summary.to_dict()
    lines = [
        f"re-embedding with {d['model']} into index v{d['version']}: {d['state']} ({d['seconds']:.1f}s)",
        f"  chunks {d['total']} total, {d['already_present']} already present, {d['chunks_written']} written "
        f"({d['chunks_embedded']} embedded, {d['embedding_cache_hits']} from cache), {d['failed']} failed",
        f"  throughput {d['chunks_per_s']} chunks/s; counts {d['counts']}",
    ]
    for reason in d["gate"].get("reasons", []):
        lines.append(f"  refused: {reason}")
    if d["state"] == "building":
        lines.append(f"  no --golden: not flipped; flip with `ragsync index-versions flip {d['version']}`")
    emit(args, d, "\n".join(lines))
    return 1 if d["state"] == "refused" else 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from beam_pipelines.reindex import run_reindex
    from ragsync.config import open_catalog

    settings = existing_settings(args)
    backfill_id = args.backfill_id
    if backfill_id is None:
        if args.reason is None:
            raise SystemExit("ragsync reindex: give a BACKFILL_ID or --reason parser|chunker")
        catalog = open_catalog(settings)
        try:
            row = catalog.backfills.create_backfill(
                reason=args.reason,
                target_index=settings.collection,
                max_docs_per_s=args.max_docs_per_s or None,
                tenant_id=args.tenant,
            )
        finally:
            catalog.close()
        backfill_id = row.backfill_id
    summary = run_reindex(
        settings, backfill_id, beam_args=args.beam_args, show_progress=not args.quiet and not args.json
    )
    d = summary.to_dict()
    who = f"tenant {d['tenant_id']}" if d["tenant_id"] else "every tenant"
    human = (
        f"{d['reason']} backfill {d['backfill_id']} of {who}: {d['state']}, {d['done']} of {d['total']} "
        f"documents at the current {d['reason']}, {d['failed']} failed ({d['seconds']:.1f}s)"
    )
    emit(args, d, human + (f"\n  {d['error']}" if d["error"] else ""))
    return 0


def cmd_index_versions(args: argparse.Namespace) -> int:
    from ragsync.index import versions as iv

    settings = existing_settings(args)
    if args.action == "flip":
        if args.version is None:
            raise SystemExit("ragsync index-versions flip: give the version number")
        v = iv.flip(settings, args.version)
        emit(args, v.to_dict(), f"index v{v.version} is live")
        return 0
    if args.action == "rollback":
        v = iv.rollback(settings)
        emit(args, v.to_dict(), f"rolled back: index v{v.version} is live")
        return 0
    if args.action == "gc":
        dropped = iv.gc(settings)
        emit(args, {"dropped": dropped}, f"dropped versions: {dropped or 'none'}")
        return 0
    versions = iv.list_versions(settings)
    human = "\n".join(iv.describe(v) for v in versions) or "no index versions (run `ragsync backfill` first)"
    emit(args, [v.to_dict() for v in versions], human)
    return 0


def cmd_eval_retrieval(args: argparse.Namespace) -> int:
    from ragsync.index import versions as iv
    from ragsync.query.evaluation import evaluate, format_report, load_golden

    settings = existing_settings(args)
    version = iv.get_version(settings, args.version) if args.version is not None else None
    report = evaluate(
        settings, load_golden(args.golden), version=version, k=args.k, groups=split_list(args.groups)
    )
    emit(args, report.to_dict(), format_report(report))
    return 0


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``reembed``, ``reindex``, ``index-versions`` and ``eval-retrieval``."""
    r = subparsers.add_parser(
        "reembed", parents=[common], help="re-embed stored chunks into a new index version, gated flip"
    )
    r.add_argument(
        "--model",
        required=True,
        help="all-MiniLM-L6-v2, multilingual-e5-small or a local sentence-transformers directory",
    )
    r.add_argument("--max-docs-per-s", type=float, default=0.0, help="rate limit in documents/s (0: none)")
    r.add_argument("--tolerance", type=float, default=0.02, help="allowed Recall@10 drop per format")
    r.add_argument("--golden", help="golden JSONL file; without it the new version is built but not flipped")
    r.add_argument("--groups", default="everyone", help="groups the golden queries run as")
    r.add_argument("--batch-size", type=int, default=None, help="chunks per embed/write batch")
    add_run_flags(r)
    r.set_defaults(func=cmd_reembed)

    x = subparsers.add_parser(
        "reindex",
        parents=[common],
        help="parse or chunk indexed documents again from their stored copies (a parser or chunker backfill)",
    )
    x.add_argument(
        "backfill_id", nargs="?", help="a requested backfill (POST /v1/backfills) to run or resume"
    )
    x.add_argument(
        "--reason", choices=["parser", "chunker"], help="without BACKFILL_ID: request one and run it"
    )
    x.add_argument("--tenant", help="with --reason: only this tenant's documents (default: every tenant)")
    x.add_argument("--max-docs-per-s", type=float, default=0.0, help="with --reason: rate limit (0: none)")
    add_run_flags(x)
    x.set_defaults(func=cmd_reindex)

    v = subparsers.add_parser("index-versions", parents=[common], help="list, flip, roll back or gc versions")
    v.add_argument("action", nargs="?", default="list", choices=["list", "flip", "rollback", "gc"])
    v.add_argument("version", nargs="?", type=int, help="for flip: the version to make live")
    v.set_defaults(func=cmd_index_versions)

    e = subparsers.add_parser("eval-retrieval", parents=[common], help="golden-set Recall@10 per format")
    e.add_argument("--golden", required=True, help="golden JSONL file (see ragsync.query.evaluation)")
    e.add_argument("--version", type=int, default=None, help="index version (default: the live one)")
    e.add_argument("--groups", default="everyone", help="groups the queries run as")
    e.add_argument("-k", type=int, default=10, help="cutoff (default 10)")
    e.set_defaults(func=cmd_eval_retrieval)
