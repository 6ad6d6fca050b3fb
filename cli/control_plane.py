"""``ragsync tenants ...`` and ``ragsync serve``: the control plane's commands.

Registered through ``cli.main.PLUGIN_MODULES``. Handlers return the
exit code: 0 success, 2 usage or configuration error (a taken tenant name, a
non-loopback ``--host`` without ``--allow-remote``). FastAPI and uvicorn are
imported only by ``serve``, so the other commands work without them.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from control_plane.limits import DEFAULT_MAX_PENDING_SYNCS, DEFAULT_MAX_SOURCES

if TYPE_CHECKING:  # the catalog (SQLAlchemy) loads only in the commands that use it
    from control_plane.worker import Worker
    from ragsync.catalog import TenantRow

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def _catalog_url(args: argparse.Namespace) -> str:
    """The catalog of the settings (``--catalog-url``, ``$RAGSYNC_CATALOG_URL``, SQLite under home)."""
    return str(_settings(args).catalog_url)


def _tenant_dict(row: TenantRow) -> dict[str, Any]:
    return {
        "tenant_id": row.tenant_id,
        "name": row.name,
        "created_at": row.created_at,
        "active_keys": row.active_keys,
    }


def cmd_tenants_create(args: argparse.Namespace) -> int:
    """Create a tenant and print its first API key (shown once)."""
    from control_plane.keys import ApiKeys
    from ragsync.catalog import Catalog, ConflictError

    with Catalog.open(_catalog_url(args)) as catalog:
        try:
            row, key = ApiKeys(catalog).create_tenant(args.name, tenant_id=args.tenant_id)
        except (ConflictError, ValueError) as exc:
            print(f"ragsync: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({"tenant_id": row.tenant_id, "name": row.name, "api_key": key}))
    else:
        print(f"created tenant {row.name} (id {row.tenant_id})")
        print(f"API key (shown once, store it now): {key}")
    return 0


def cmd_tenants_list(args: argparse.Namespace) -> int:
    """List tenants with their number of active keys."""
    from ragsync.catalog import Catalog

    with Catalog.open(_catalog_url(args)) as catalog:
        rows = catalog.tenants.list_tenants()
    if args.json:
        print(json.dumps([_tenant_dict(r) for r in rows]))
    elif not rows:
        print("no tenants: create one with: ragsync tenants create NAME")
    else:
        print(f"{'tenant_id':24s} {'name':24s} active keys")
        for r in rows:
            print(f"{r.tenant_id:24s} {r.name:24s} {r.active_keys}")
    return 0


def cmd_tenants_add_key(args: argparse.Namespace) -> int:
    """Issue another API key for a tenant (key rotation)."""
    from control_plane.keys import ApiKeys
    from ragsync.catalog import Catalog

    with Catalog.open(_catalog_url(args)) as catalog:
        try:
            key_id, key = ApiKeys(catalog).create_api_key(args.tenant_id)
        except LookupError as exc:
            print(f"ragsync: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({"tenant_id": args.tenant_id, "key_id": key_id, "api_key": key}))
    else:
        print(f"API key {key_id} for {args.tenant_id} (shown once): {key}")
    return 0


def cmd_tenants_revoke_key(args: argparse.Namespace) -> int:
    """Revoke an API key by its public id (the part after ``rsk_``)."""
    from ragsync.catalog import Catalog

    with Catalog.open(_catalog_url(args)) as catalog:
        revoked = catalog.tenants.revoke_api_key(args.key_id)
    if args.json:
        print(json.dumps({"key_id": args.key_id, "revoked": revoked}))
    else:
        print(f"revoked {args.key_id}" if revoked else f"no active key {args.key_id}")
    return 0 if revoked else 2


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _patterns(given: list[str], variable: str) -> tuple[str, ...]:
    """The repeated flag's values, then the comma-separated ``variable``'s."""
    from_env = [p.strip() for p in os.environ.get(variable, "").split(",") if p.strip()]
    return (*given, *from_env)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP API with uvicorn (loopback only unless ``--allow-remote``)."""
    if not is_loopback(args.host) and not args.allow_remote:
        print(
            f"ragsync: refusing to listen on {args.host}: not a loopback address; "
            "pass --allow-remote (and put TLS in front) to expose the API",
            file=sys.stderr,
        )
        return 2
    import uvicorn

    from control_plane.app import create_app
    from control_plane.worker import Worker

    settings = _settings(args)
    worker = None
    if args.workers:

        def worker(catalog: Any) -> Worker:
            return Worker(catalog, _store_args(args, settings), schedule=not args.no_schedule)

    from connectors.credentials import GRANTS_ENV, tenant_grants

    grants = tenant_grants(args.tenant_secrets)
    # The worker (this process or a sync child) resolves tenants' references
    # against the same grants: it reads them from the environment.
    os.environ[GRANTS_ENV] = ",".join(grants)
    app = create_app(
        settings.catalog_url,
        max_body_bytes=args.max_body_bytes,
        reserved_locations=settings.reserved_locations,
        allowed_locations=_patterns(args.allow_location, "RAGSYNC_ALLOWED_LOCATIONS"),
        secret_stores=grants,
        events_per_s=args.events_per_s,
        events_burst=args.events_burst,
        worker=worker,
        metrics_token=args.metrics_token or os.environ.get("RAGSYNC_METRICS_TOKEN", ""),
        max_pending_syncs=args.max_pending_syncs_per_tenant,
        max_sources=args.max_sources_per_tenant,
        settings=settings,
        allow_caller_groups=args.allow_caller_groups
        or os.environ.get("RAGSYNC_ALLOW_CALLER_GROUPS", "") == "1",
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", server_header=False)
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """Settings from the flags, ``RAGSYNC_*`` variables and defaults (``ragsync.options``)."""
    from ragsync.options import option_values, setting_names, settings_from

    flags = {name: getattr(args, name, None) for name in setting_names()}
    settings = settings_from(option_values(flags, None))
    if settings.catalog_url.startswith("sqlite"):
        settings.ensure_home()
    return settings


def _store_args(args: argparse.Namespace, settings: Any) -> list[str]:
    """The flags a worker's children get (the same stores and limits as this
    process); secrets travel in the environment the children inherit."""
    from ragsync.options import SETTING_OPTIONS, setting_flags

    for opt in SETTING_OPTIONS:
        if opt.secret and getattr(settings, opt.name):
            os.environ[opt.env] = getattr(settings, opt.name)
    return setting_flags(settings)


def cmd_worker(args: argparse.Namespace) -> int:
    """Run accepted syncs and backfills, and the schedule, until interrupted."""
    from control_plane.worker import Worker
    from ragsync.catalog import Catalog

    settings = _settings(args)
    catalog = Catalog.open(settings.catalog_url)
    worker = Worker(catalog, _store_args(args, settings), schedule=not args.no_schedule)
    try:
        if args.once:
            worker.catalog.syncs.fail_interrupted_sync_runs()
            worker.run_once()
        else:
            worker.serve_forever(on_error=lambda exc: print(f"ragsync worker: {exc}", file=sys.stderr))
    finally:
        catalog.close()
    return 0


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``tenants {create,list,add-key,revoke-key}`` and ``serve``.

    Args:
        subparsers: the ``ragsync`` parser's subparsers action.
        common: parent parser with ``--home``, ``--json`` and ``--catalog-url``.
    """
    tenants = subparsers.add_parser("tenants", help="tenants and their API keys")
    sub = tenants.add_subparsers(dest="tenants_command", required=True)

    create = sub.add_parser("create", parents=[common], help="create a tenant; prints its API key once")
    create.add_argument("name", help="unique name (letters, digits, . _ -)")
    create.add_argument("--tenant-id", help="tenant id (default: NAME, as used by backfill --tenant)")
    create.set_defaults(func=cmd_tenants_create)

    listing = sub.add_parser("list", parents=[common], help="list tenants")
    listing.set_defaults(func=cmd_tenants_list)

    add_key = sub.add_parser("add-key", parents=[common], help="issue another API key for a tenant")
    add_key.add_argument("tenant_id")
    add_key.set_defaults(func=cmd_tenants_add_key)

    revoke = sub.add_parser("revoke-key", parents=[common], help="revoke an API key by its id")
    revoke.add_argument("key_id", help="the 16 hex digits after rsk_")
    revoke.set_defaults(func=cmd_tenants_revoke_key)
    _add_serve(subparsers, common)
    _add_worker(subparsers, common)


def _add_serve(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``serve``: the control-plane HTTP API and its worker."""
    serve = subparsers.add_parser("serve", parents=[common], help="run the control-plane HTTP API")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("RAGSYNC_PORT") or 8080),
        help="port (default $RAGSYNC_PORT, else 8080)",
    )
    serve.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --host (put TLS in front of it)"
    )
    serve.add_argument(
        "--max-body-bytes", type=int, default=1_000_000, help="largest request body (default 1000000)"
    )
    serve.add_argument(
        "--allow-location",
        action="append",
        default=[],
        metavar="LOCATION",
        help="where tenants may declare sources (repeatable; {tenant} stands for the caller's tenant id, "
        "e.g. /srv/docs/{tenant} or s3://corp-docs/{tenant}); also RAGSYNC_ALLOWED_LOCATIONS "
        "(comma-separated). None: tenants cannot declare locations through the API",
    )
    serve.add_argument(
        "--tenant-secrets",
        action="append",
        default=[],
        metavar="STORE",
        help="a secret store tenants may name in credentials_ref (repeatable; {tenant} as above): "
        "secretmanager://projects/P/secrets/{tenant} (secrets {tenant}_NAME) or a folder "
        "file:///srv/secrets/{tenant}; also RAGSYNC_TENANT_SECRETS. None: tenants' sources are public; "
        "env:// is never a tenant's",
    )
    serve.add_argument(
        "--events-per-s",
        type=float,
        default=200.0,
        help="each tenant's sustained event budget on /internal/events (default 200; then 429)",
    )
    serve.add_argument(
        "--events-burst", type=int, default=2000, help="events a tenant may send at once (default 2000)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        choices=(0, 1),
        help="1 (default): run accepted syncs and backfills in a worker thread; "
        "0: leave them to `ragsync worker`",
    )
    serve.add_argument("--no-schedule", action="store_true", help="no scheduled polls or daily full listings")
    serve.add_argument(
        "--max-pending-syncs-per-tenant",
        type=int,
        default=DEFAULT_MAX_PENDING_SYNCS,
        help=f"syncs a tenant may have queued or running (default {DEFAULT_MAX_PENDING_SYNCS}; then 429)",
    )
    serve.add_argument(
        "--max-sources-per-tenant",
        type=int,
        default=DEFAULT_MAX_SOURCES,
        help=f"sources a tenant may register (default {DEFAULT_MAX_SOURCES}; then 403)",
    )
    serve.add_argument(
        "--allow-caller-groups",
        action="store_true",
        help="POST /v1/query may name the reader's groups instead of a synced user "
        "(also RAGSYNC_ALLOW_CALLER_GROUPS=1); off: only `user`",
    )
    serve.add_argument(
        "--metrics-token",
        default="",
        help="bearer token GET /metrics requires (also RAGSYNC_METRICS_TOKEN); none: loopback scrapes only",
    )
    serve.set_defaults(func=cmd_serve)


def _add_worker(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``worker``: run accepted syncs and backfills apart from ``serve``."""
    worker = subparsers.add_parser(
        "worker", parents=[common], help="run accepted syncs and backfills (and the sync schedule)"
    )
    worker.add_argument(
        "--no-schedule", action="store_true", help="no scheduled polls or daily full listings"
    )
    worker.add_argument(
        "--once", action="store_true", help="one pass (schedule, one sync, one backfill), then exit"
    )
    worker.set_defaults(func=cmd_worker)
