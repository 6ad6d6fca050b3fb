"""Steps a test takes to drive ragsync in-process, as a folder's owner and
its change feed would: write the ACL sidecar, run a backfill of the folder,
queue change events, run the streaming pipeline until the queue is drained,
and read back what each group finds.

Every step runs the real pipeline (FnApiRunner, the real model, Milvus Lite,
tantivy, SQLite) through the CLI, in a process of its own; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ACL_SIDECAR = ".ragsync-acl.json"
ROOT = Path(__file__).resolve().parents[1]


def write_sidecar(folder: Path, rules: Mapping[str, Sequence[str]], default: Sequence[str] = ()) -> None:
    """Write ``folder``'s ACL sidecar: ``rules`` maps a glob to its groups;
    files no rule matches get ``default``."""
    data: dict[str, Any] = {"rules": [{"glob": g, "groups": list(groups)} for g, groups in rules.items()]}
    if default:
        data["default"] = list(default)
    (folder / ACL_SIDECAR).write_text(json.dumps(data))


def register_folder(
    folder: Path, settings: Any, *, tenant: str, source_id: str, domain: str = "timestamp"
) -> None:
    """Create the stores and register ``folder`` as source ``source_id`` of
    ``tenant`` whose versions (file times) are ``domain`` values, before any
    event names it."""
    from connectors.sources import register_source
    from ragsync.embedding.models import default_model
    from ragsync.index.versions import prepare_stores

    prepare_stores(settings, default_model())
    register_source(settings, source_id, tenant, "object_store", str(folder), version_domain=domain)


def _cli(settings: Any, *argv: str) -> dict[str, Any]:
    """Run ``ragsync ARGV --json`` in a process of its own and return its
    summary. Pipelines run out of process: a parse worker forked from a test
    process that already holds gRPC threads (Milvus Lite's client, earlier
    pipelines) can crash, a flake that has nothing to do with the product."""
    cmd = [sys.executable, "-m", "cli.main", *argv, "--home", settings.home, "--json"]
    env = {**os.environ, "RAGSYNC_EVENT_LEASE_S": str(settings.event_lease_s)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (argv, proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def backfill(folder: Path, settings: Any, *, tenant: str, source_id: str) -> dict[str, Any]:
    """One backfill run of ``folder`` as source ``source_id`` of ``tenant``
    (``ragsync backfill``; deletes are never held back: a test deletes most
    of a tiny folder). Returns its summary."""
    return _cli(
        settings,
        "backfill",
        str(folder),
        "--tenant",
        tenant,
        "--source-id",
        source_id,
        "--max-delete-share",
        "1",
        "--quiet",
    )


def push(settings: Any, events: Iterable[Mapping[str, Any]]) -> None:
    """Queue events (decoded JSON, validated as ``events push`` does)."""
    from connectors.events import parse_event
    from ragsync.config import open_catalog

    cat = open_catalog(settings)
    try:
        cat.queue.enqueue_events([parse_event(dict(e)) for e in events])
    finally:
        cat.close()


def stream(settings: Any) -> dict[str, Any]:
    """Run the streaming pipeline until the queue is drained (``ragsync
    stream --until-idle``); its summary."""
    return _cli(settings, "stream", "--until-idle", "--quiet")


def visible(
    settings: Any, questions: Iterable[str], groups: Iterable[str], *, tenant: str
) -> dict[str, set[tuple[str, str]]]:
    """What each group finds: ``{group: {(file name, chunk text)}}`` over
    every question (the real query path, top 10 per question)."""
    from ragsync.query.search import hybrid_query

    out: dict[str, set[tuple[str, str]]] = {}
    for group in groups:
        seen: set[tuple[str, str]] = set()
        for q in questions:
            for hit in hybrid_query(settings, q, groups=[group], tenant_id=tenant, k=10):
                seen.add((hit.uri.rsplit("/", 1)[1], hit.text.strip()))
        out[group] = seen
    return out
