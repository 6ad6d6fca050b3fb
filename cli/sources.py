"""Commands of the connector side: ``sources add|list|pause|resume|webhook-secret`` and ``sync``.

Exit codes: 0 success; 1 the sync did not complete (the source is paused,
the listing failed or the partial-listing guard held deletes back: the
message says which and what to do); 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from cli.common import add_run_flags, emit, existing_settings, settings_from_args, split_list
from ragsync.decisions import VERSION_DOMAINS
from ragsync.ops.console import fail
from ragsync.source_types import SYNC_KINDS, default_uri, source_types


def _options(pairs: list[str] | None, groups: str | None) -> dict[str, Any] | None:
    """``--option key=JSON`` pairs (a bare word is a string) and ``--acl-groups``."""
    if not pairs and groups is None:
        return None
    from ragsync.errors import ConfigurationError

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--option {pair!r}: give key=value")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    if groups is not None:
        out["acl_groups"] = split_list(groups)
    return out


def cmd_sources_add(args: argparse.Namespace) -> int:
    """Register a source with its location (``--uri``) and connector settings."""
    from connectors.sources import register_source

    uri = args.uri or default_uri(args.type)
    try:
        register_source(
            settings_from_args(args),
            args.source_id,
            args.tenant,
            args.type,
            uri,
            options=_options(args.option, args.acl_groups),
            credentials_ref=args.credentials_ref,
            sync=args.sync,
            poll_interval_s=args.poll_interval_s,
            version_domain=args.version_domain,
        )
    except ValueError as exc:
        return fail(exc, 2)
    data = {"source_id": args.source_id, "tenant_id": args.tenant, "type": args.type, "uri": uri}
    if args.version_domain:
        data["version_domain"] = args.version_domain
    where = f" at {uri}" if uri else ""
    emit(args, data, f"source {args.source_id} ({args.type}{where}) registered for tenant {args.tenant}")
    return 0


def _age(now: float, at: float | None) -> str:
    return "never" if at is None else f"{now - at:.0f}s ago"


def cmd_sources_list(args: argparse.Namespace) -> int:
    """Sources with their sync state (paused ones with the reason)."""
    from ragsync.config import open_catalog

    catalog = open_catalog(existing_settings(args))
    try:
        states = catalog.syncs.source_states(args.tenant)
    finally:
        catalog.close()
    now = time.time()
    data = [s.public() for s in states]
    human = []
    for s in states:
        status = f"PAUSED: {s.pause_reason}" if s.paused else "active"
        human.append(
            f"{s.source_id:20s} {s.type:12s} {status}\n"
            f"    {s.uri or '(no location)'}; last sync {_age(now, s.last_sync_at)}, last full listing "
            f"{_age(now, s.last_full_at)}, {s.failures} failures in a row"
        )
    emit(args, data, "\n".join(human) or "no sources: add one with `ragsync sources add`")
    return 0


def cmd_sources_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, True)


def cmd_sources_resume(args: argparse.Namespace) -> int:
    """Clear a pause (and the failure count): the next sync runs."""
    return _set_paused(args, False)


def cmd_sources_webhook_secret(args: argparse.Namespace) -> int:
    """Make a new webhook token for a source: its SHA-256 is stored in the
    source's options (replacing any earlier one), the token is printed once."""
    import secrets

    from connectors.credentials import WEBHOOK_SECRET_OPTION, webhook_secret_hash
    from ragsync.config import open_catalog

    token = secrets.token_urlsafe(32)
    catalog = open_catalog(existing_settings(args))
    try:
        state = catalog.sources.get_source(args.source_id, tenant_id=args.tenant)
        if state is None:
            return fail(f"unknown source {args.source_id!r}", 2)
        options = {**state.options, WEBHOOK_SECRET_OPTION: webhook_secret_hash(token)}
        catalog.syncs.configure_source(state.source_id, tenant_id=state.tenant_id, options=options)
    finally:
        catalog.close()
    path = f"/v1/sources/{state.source_id}/webhook"
    data = {"source_id": state.source_id, "tenant_id": state.tenant_id, "token": token, "path": path}
    human = (
        f"webhook token of source {state.source_id} (shown once; only its hash is stored): {token}\n"
        f"URL: https://YOUR-HOST{path}?token={token}  (Drive: give the token as the channel's token)"
    )
    emit(args, data, human)
    return 0


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    """Pause (with ``--reason``) or resume ``args.source_id``; exit 2 when
    the tenant has no such source."""
    from ragsync.config import open_catalog

    catalog = open_catalog(existing_settings(args))
    try:
        if paused:
            reason = args.reason or "paused by an operator"
            found = catalog.syncs.pause_source(args.source_id, reason, tenant_id=args.tenant)
        else:
            found = catalog.syncs.resume_source(args.source_id, args.tenant)
    finally:
        catalog.close()
    if not found:
        return fail(f"unknown source {args.source_id!r}", 2)
    done = "paused" if paused else "resumed"
    emit(args, {"source_id": args.source_id, "paused": paused}, f"source {args.source_id} {done}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    """Run the source's connector once (see ``beam_pipelines.sync``)."""
    from beam_pipelines.sync import SyncError, run_sync

    if args.dry_run:
        from beam_pipelines.dry_run import plan_source_sync
        from cli.common import emit_plan

        plan = plan_source_sync(
            args.source_id,
            existing_settings(args),
            full=args.full,
            tenant_id=args.tenant,
            max_delete_share=args.max_delete_share,
        )
        return emit_plan(args, plan)
    try:
        result = run_sync(
            args.source_id,
            existing_settings(args),
            full=args.full,
            beam_args=args.beam_args,
            show_progress=not args.quiet,
            max_delete_share=args.max_delete_share,
            apply=not args.no_apply,
            tenant_id=args.tenant,
        )
    except SyncError as exc:
        if args.json:
            print(
                json.dumps({"source_id": args.source_id, "error": str(exc), "error_class": exc.error_class})
            )
        return fail(exc, 1)
    d = result.to_dict()
    lines = [f"sync of {result.source_id} ({result.mode}: {result.reason}) finished in {result.seconds:.1f}s"]
    lines += [f"  {k:20s} {v}" for k, v in d["totals"].items()]
    lines.append("  (--json for every counter of the listing, the change feed and the applied queue)")
    emit(args, d, "\n".join(lines))
    return 0


def cmd_identities_sync(args: argparse.Namespace) -> int:
    """Refresh one source's users, groups and memberships (see ``beam_pipelines.sync.run_identity_sync``)."""
    from beam_pipelines.sync import run_identity_sync

    d = run_identity_sync(args.source, existing_settings(args), tenant_id=args.tenant)
    text = (
        f"identities of {d['source_id']} (tenant {d['tenant_id']}): {d['users']} users, "
        f"{d['groups']} groups, {d['memberships']} memberships in {d['seconds']:.1f}s"
    )
    emit(args, d, text)
    return 0


_TENANT_HELP = "the source's tenant (needed when several tenants have a source of this id)"


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``sources`` and ``sync``."""
    src = sub.add_parser("sources", help="register, list, pause and resume sources")
    src_sub = src.add_subparsers(dest="sources_command", required=True)
    add = src_sub.add_parser("add", parents=[common], help="register a source (same as POST /v1/sources)")
    add.add_argument("source_id")
    add.add_argument("--tenant", required=True, help="the tenant that owns the source")
    # The types registered when the parser is built: the built-in ones and those
    # of the plug-ins the command line loaded first (``cli.main.main``).
    add.add_argument("--type", required=True, choices=source_types())
    add.add_argument(
        "--uri",
        help="the source's location: a folder, gs:// or s3:// prefix, or the API URL "
        "(a wiki's api.php, a Jira base URL; Drive defaults to its API)",
    )
    add.add_argument(
        "--credentials-ref", help="env://VAR or file:///path holding the Authorization header (public: omit)"
    )
    add.add_argument("--acl-groups", help="comma-separated groups for what is not public (connector option)")
    add.add_argument(
        "--option", action="append", metavar="KEY=VALUE", help="connector option (JSON value), repeatable"
    )
    add.add_argument("--sync", choices=SYNC_KINDS, help="how `ragsync serve` keeps it current")
    add.add_argument("--poll-interval-s", type=int, help="seconds between polls (with --sync poll)")
    add.add_argument(
        "--version-domain",
        choices=VERSION_DOMAINS,
        help="how the source's event versions compare: revision numbers, timestamps (epoch seconds or "
        "ISO 8601) or opaque etags; versions of another domain (a folder listing's file times) are "
        "ordered by when the source showed them",
    )
    add.set_defaults(func=cmd_sources_add)

    ls = src_sub.add_parser("list", parents=[common], help="sources and their sync state")
    ls.add_argument("--tenant", help="only this tenant's sources")
    ls.set_defaults(func=cmd_sources_list)

    pause = src_sub.add_parser("pause", parents=[common], help="stop syncing a source")
    pause.add_argument("source_id")
    pause.add_argument("--tenant", help=_TENANT_HELP)
    pause.add_argument("--reason")
    pause.set_defaults(func=cmd_sources_pause)

    resume = src_sub.add_parser("resume", parents=[common], help="sync a paused source again")
    resume.add_argument("source_id")
    resume.add_argument("--tenant", help=_TENANT_HELP)
    resume.set_defaults(func=cmd_sources_resume)

    hook = src_sub.add_parser(
        "webhook-secret", parents=[common], help="make a new webhook token for a source (printed once)"
    )
    hook.add_argument("source_id")
    hook.add_argument("--tenant", help=_TENANT_HELP)
    hook.set_defaults(func=cmd_sources_webhook_secret)
    _add_sync(sub, common)
    _add_identities(sub, common)


def _add_sync(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``sync``: one run of a source's connector."""
    sy = sub.add_parser("sync", parents=[common], help="run a source's connector once")
    sy.add_argument("source_id")
    sy.add_argument("--tenant", help=_TENANT_HELP)
    sy.add_argument("--full", action="store_true", help="full listing; what vanished is deleted")
    sy.add_argument(
        "--max-delete-share",
        type=float,
        help="largest share of the source's documents one full listing may delete "
        "(default: the source's option, else 0.5)",
    )
    sy.add_argument(
        "--no-apply",
        action="store_true",
        help="only queue the changes (a running `ragsync stream` applies them)",
    )
    sy.add_argument(
        "--dry-run",
        action="store_true",
        help="list the adds, updates, permission changes and deletes the sync would make, by object id "
        "(the cursor is not saved, nothing is queued or written)",
    )
    add_run_flags(sy, beam_help="after --: Beam options for the listing pipeline")
    sy.set_defaults(func=cmd_sync)


def _add_identities(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``identities sync``: a source's users and memberships now."""
    ids = sub.add_parser("identities", help="users and group memberships synced from the sources")
    ids_sub = ids.add_subparsers(dest="identities_command", required=True)
    isync = ids_sub.add_parser(
        "sync", parents=[common], help="refresh a source's users and memberships now (also part of `sync`)"
    )
    isync.add_argument("--source", required=True, help="the source id")
    isync.add_argument("--tenant", help=_TENANT_HELP)
    isync.set_defaults(func=cmd_identities_sync)
