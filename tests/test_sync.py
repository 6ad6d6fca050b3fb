"""End to end: ``ragsync sync`` and ``ragsync backfill`` as full syncs, with
the real model, Milvus Lite, tantivy and SQLite; a real MediaWiki for the
wiki (tests/mediawiki.py).

Covers: the first sync indexes every page; an edit, a delete, a move and a
new page are applied exactly by the next sync; vanished files become
deletes; the partial-listing guard holds deletes back and pauses the source;
a listing that fails deletes nothing, pauses the source and exits non-zero;
a source whose change feed fails N times in a row is paused; resume.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from beam_pipelines.backfill import run_backfill
from beam_pipelines.quick import source_id_for
from beam_pipelines.sync import ListingGuardError, run_sync
from cli.main import main
from connectors.sources import SourcePausedError
from ragsync.config import Settings, open_catalog
from ragsync.errors import SyncError
from ragsync.query.search import hybrid_query
from tests.mediawiki import MediaWiki
from tests.serving import wait_until_healthy

pytestmark = pytest.mark.slow
TENANT = "acme"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    out = captured.out.strip()
    try:
        data = json.loads(out.splitlines()[-1]) if out else None
    except ValueError:
        data = out
    return code, data, captured.err


def _hits(settings: Settings, text: str) -> list[str]:
    """Texts of the top results (k=3) for everyone in the tenant."""
    return [r.text for r in hybrid_query(settings, text, groups=["everyone"], tenant_id=TENANT, k=3)]


def _found(settings: Settings, phrase: str) -> bool:
    return any(phrase in t for t in _hits(settings, phrase))


def _indexed(settings: Settings) -> int:
    catalog = open_catalog(settings)
    try:
        return catalog.documents.document_counts_by_status().get("indexed", 0)
    finally:
        catalog.close()


# -- a MediaWiki source ----------------------------------------------------------------

ALPHA_OLD = "Alpacas graze on the high plateau of the Andes every summer."
ALPHA_NEW = "Alpacas were moved to the winter stables in the valley below."
BETA = "Barges carry coal along the canal between the two harbours."
GAMMA = "Greenhouses keep the tomatoes warm through the cold northern nights."
EPSILON = "Elevators in the north tower are inspected every second Tuesday."


def test_wiki_sync_first_full_then_exact_changes_then_stopped_wiki_pauses(
    mediawiki: MediaWiki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mediawiki.edit("Alpha", f"== Animals ==\n{ALPHA_OLD}")
    mediawiki.edit("Beta", f"== Transport ==\n{BETA}")
    mediawiki.edit("Gamma", f"== Gardens ==\n{GAMMA}")
    home = str(tmp_path / "home")
    settings = Settings(home=home)
    code, data, _ = _cli(
        capsys, "sources", "add", "wiki-1", "--tenant", TENANT, "--type", "wiki", "--uri", mediawiki.api_url,
        "--home", home, "--json",
    )  # fmt: skip
    assert code == 0 and data["uri"] == mediawiki.api_url

    # First sync: no cursor yet, so a full listing of every page.
    code, first, err = _cli(capsys, "sync", "wiki-1", "--home", home, "--json", "--quiet")
    assert code == 0, err
    assert first["mode"] == "full" and first["reason"] == "first sync: no cursor yet"
    listing = first["listing"]
    assert (listing["documents_listed"], listing["documents_indexed"], listing["dead_lettered"]) == (4, 4, 0)
    assert listing["documents_vanished"] == 0 and first["applied"] is None
    assert _indexed(settings) == 4
    assert _found(settings, ALPHA_OLD) and _found(settings, BETA) and _found(settings, GAMMA)
    # A hit links to its page (not to the Action API call that fetched it),
    # and that link opens the page.
    (alpha,) = [r for r in hybrid_query(settings, ALPHA_OLD, groups=["everyone"], tenant_id=TENANT, k=1)]
    assert alpha.uri.startswith(mediawiki.api_url.replace("api.php", "index.php?curid="))
    page = httpx.get(alpha.uri, follow_redirects=True, timeout=30)
    assert page.status_code == 200 and "<title>Alpha" in page.text and ALPHA_OLD in page.text

    mediawiki.edit("Alpha", f"== Animals ==\n{ALPHA_NEW}")
    mediawiki.delete("Beta")
    mediawiki.move("Gamma", "Delta")
    mediawiki.edit("Epsilon", f"== Buildings ==\n{EPSILON}")

    # Second sync: exactly those four changes, read from recent changes.
    code, second, err = _cli(capsys, "sync", "wiki-1", "--home", home, "--json", "--quiet")
    assert code == 0, err
    assert second["mode"] == "incremental" and second["listing"] is None
    feed = second["feed"]
    assert (feed["events_read"], feed["events_queued"], feed["upserts"], feed["deletes"]) == (4, 4, 3, 1)
    applied = second["applied"]
    assert (applied["documents_indexed"], applied["documents_deleted"], applied["dead_lettered"]) == (3, 1, 0)
    assert _indexed(settings) == 4  # Main Page, Alpha, Delta (was Gamma), Epsilon
    assert _found(settings, ALPHA_NEW) and not _found(settings, ALPHA_OLD)
    assert not _found(settings, BETA)
    assert _found(settings, EPSILON)
    delta = hybrid_query(settings, GAMMA, groups=["everyone"], tenant_id=TENANT, k=1)[0]
    assert GAMMA in delta.text and delta.heading_path[0] == "Delta"  # the moved page's new title

    # Nothing changed: nothing read, nothing applied.
    code, third, _ = _cli(capsys, "sync", "wiki-1", "--home", home, "--json", "--quiet")
    assert code == 0 and third["feed"]["events_read"] == 0 and third["applied"] is None

    # The wiki is down: a full listing fails, deletes nothing, pauses the source.
    mediawiki.stop()
    code, failed, err = _cli(capsys, "sync", "wiki-1", "--full", "--home", home, "--json", "--quiet")
    assert code == 1 and "cannot reach" in failed["error"], err
    assert _indexed(settings) == 4 and _found(settings, EPSILON)
    code, status, _ = _cli(capsys, "status", "--home", home, "--json")
    (source,) = status["sources"]
    assert source["paused"] and "cannot reach" in source["pause_reason"]
    code, _, err = _cli(capsys, "sync", "wiki-1", "--home", home, "--json", "--quiet")
    assert code == 1 and "is paused" in err

    # Back up and resumed: the full listing finds nothing to delete.
    mediawiki.start()
    assert _cli(capsys, "sources", "resume", "wiki-1", "--home", home, "--json")[0] == 0
    code, full, err = _cli(capsys, "sync", "wiki-1", "--full", "--home", home, "--json", "--quiet")
    assert code == 0, err
    assert (full["listing"]["documents_listed"], full["listing"]["documents_vanished"]) == (4, 0)
    assert full["listing"]["documents_unchanged"] == 4


def test_a_failing_change_feed_pauses_the_source_after_n_failures(
    mediawiki: MediaWiki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path / "home")
    settings = Settings(home=home)
    code, _, _ = _cli(
        capsys, "sources", "add", "wiki-2", "--tenant", TENANT, "--type", "wiki", "--uri", mediawiki.api_url,
        "--option", "pause_after_failures=2", "--home", home,
    )  # fmt: skip
    assert code == 0
    catalog = open_catalog(settings)
    catalog.syncs.save_cursor("wiki-2", "20260101000000|1")  # as if synced before
    catalog.close()
    mediawiki.stop()
    for attempt in (1, 2):
        with pytest.raises(SyncError, match="cannot reach"):
            run_sync("wiki-2", settings, show_progress=False)
        catalog = open_catalog(settings)
        state = catalog.sources.get_source("wiki-2")
        catalog.close()
        assert state is not None and state.failures == attempt and state.paused == (attempt == 2)
    assert "2 syncs failed in a row" in state.pause_reason
    with pytest.raises(SourcePausedError):
        run_sync("wiki-2", settings, show_progress=False)


# -- a folder source (ragsync backfill is a full sync) --------------------------------------


def _write(root: Path, names: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / f"{name}.md").write_text(
            f"# {name}\n\nThe {name} procedure is documented on this page only.\n"
        )


def test_backfill_deletes_vanished_files_behind_the_partial_listing_guard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "docs"
    _write(src, ["kayak", "lantern", "marmot", "nebula"])
    settings = Settings(home=str(tmp_path / "home"))
    first = run_backfill(str(src), settings, tenant_id=TENANT, show_progress=False)
    assert (first.documents_listed, first.documents_indexed, first.documents_deleted) == (4, 4, 0)

    (src / "kayak.md").unlink()  # one of four: 25 %, under the 50 % guard
    second = run_backfill(str(src), settings, tenant_id=TENANT, show_progress=False)
    assert (second.documents_listed, second.documents_unchanged, second.documents_deleted) == (3, 3, 1)
    assert not _found(settings, "The kayak procedure") and _found(settings, "The lantern procedure")

    (src / "lantern.md").unlink()
    (src / "marmot.md").unlink()  # two of three: 67 %, above the guard
    with pytest.raises(ListingGuardError, match="would delete 2 of 3 documents"):
        run_backfill(str(src), settings, tenant_id=TENANT, show_progress=False)
    assert _indexed(settings) == 3 and _found(settings, "The marmot procedure")  # nothing deleted
    source_id = source_id_for(str(src))
    with pytest.raises(SourcePausedError):
        run_backfill(str(src), settings, tenant_id=TENANT, show_progress=False)

    home = settings.home
    assert _cli(capsys, "sources", "resume", source_id, "--home", home, "--json")[0] == 0
    code, data, err = _cli(
        capsys, "sync", source_id, "--full", "--max-delete-share", "1", "--home", home, "--json", "--quiet"
    )
    assert code == 0, err
    assert data["listing"]["documents_vanished"] == 2 and data["applied"]["documents_deleted"] == 2
    assert _indexed(settings) == 1 and not _found(settings, "The marmot procedure")


def test_a_folder_that_cannot_be_listed_fails_the_sync_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "docs"
    _write(src, ["orchid", "pelican"])
    settings = Settings(home=str(tmp_path / "home"))
    run_backfill(str(src), settings, tenant_id=TENANT, show_progress=False)
    shutil.rmtree(src)  # e.g. an unmounted share: the listing fails, it is not "empty"
    code, data, err = _cli(
        capsys, "sync", source_id_for(str(src)), "--full", "--home", settings.home, "--json", "--quiet"
    )
    assert code == 1 and "cannot list" in data["error"], err
    assert _indexed(settings) == 2
    catalog = open_catalog(settings)
    state = catalog.sources.get_source(source_id_for(str(src)))
    catalog.close()
    assert state is not None and state.paused and "cannot list" in state.pause_reason


# -- through the control plane ----------------------------------------------------------


def test_a_sync_requested_through_the_api_runs_in_serve_and_is_searchable(
    mediawiki: MediaWiki, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from tests.mediawiki import free_port

    mediawiki.edit("Alpha", f"== Animals ==\n{ALPHA_OLD}")
    home = str(tmp_path / "home")
    cli = [sys.executable, "-m", "cli.main"]
    made = subprocess.run(
        [*cli, "tenants", "create", TENANT, "--home", home, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    key = json.loads(made.stdout)["api_key"]
    port = free_port()
    serve = subprocess.Popen(
        # The operator lets tenants declare this wiki (and nothing else).
        [
            *cli,
            "serve",
            "--home",
            home,
            "--port",
            str(port),
            "--no-schedule",
            "--allow-location",
            mediawiki.api_url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("wb"),
        start_new_session=True,
    )
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"})
        wait_until_healthy(api, tmp_path / "serve.log")
        body = {"type": "wiki", "uri": mediawiki.api_url, "sync": "webhook", "source_id": "wiki-api"}
        assert api.post("/v1/sources", json=body).status_code == 201
        run = api.post("/v1/sources/wiki-api/sync", json={"mode": "incremental"}).json()
        assert run["state"] == "queued"
        states = []
        deadline = time.monotonic() + 900
        while run["state"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1.0)
            run = api.get(f"/v1/sources/wiki-api/sync/{run['sync_id']}").json()
            states.append(run["state"])
        assert run["state"] == "succeeded", run["error"]
        assert "running" in states and run["started_at"] <= run["finished_at"]
        # No cursor yet, so the worker's sync listed everything.
        assert run["counts"]["mode"] == "full"
        assert (run["counts"]["documents_listed"], run["counts"]["documents_indexed"]) == (2, 2)
        source = api.get("/v1/sources/wiki-api").json()
        assert source["last_full_at"] is not None and not source["paused"]
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
    assert _found(Settings(home=home), ALPHA_OLD)
