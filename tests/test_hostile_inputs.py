"""The trust boundary attacked end to end, the way a tenant would: events
through the stream, a hostile folder through a backfill, and the API.

Whatever a tenant names, ragsync reads only regular files under the source's
location, within the byte limit; everything refused is a dead letter with a
reason that is not retried on restart, the rest of the work goes on, and the
secret outside the location never becomes searchable.
(The reader's own unit tests are in ``tests/test_trust_boundary.py``.)
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from beam_pipelines.backfill import run_backfill
from beam_pipelines.streaming import run_stream
from connectors.events import parse_event
from connectors.sources import register_source
from control_plane.app import create_app
from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import default_model
from ragsync.index.versions import prepare_stores
from ragsync.query.search import hybrid_query
from tests.fixtures_gen import flate_bomb_pdf
from tests.proc import cli, run_watching_memory
from tests.serving import served

pytestmark = pytest.mark.slow
SECRET = "The vault combination is seven seven three one."
GOOD = "# Holidays\n\nThe office closes on the first Monday of August for the summer holiday.\n"
LIMIT = 64 * 1024


def _world(tmp_path: Path) -> dict[str, Path]:
    """Tenant A's folder full of traps, tenant B's folder and a secret outside both."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    secret = tmp_path / "secret.md"
    secret.write_text(f"# Secret\n\n{SECRET}\n")
    (b / "b-only.md").write_text(f"# B\n\n{SECRET}\n")
    (a / "good.md").write_text(GOOD)
    os.symlink(a / "good.md", a / "alias.md")  # a link inside the root is fine
    os.symlink(secret, a / "leak.md")  # a link leaving the root is refused
    os.symlink("/dev/zero", a / "zero.md")  # a device behind a link
    os.mkfifo(a / "pipe.md")  # would hang a reader forever
    (a / "big.md").write_text("# Big\n\n" + "word " * (LIMIT // 4))  # over the byte limit
    return {"a": a, "b": b, "secret": secret}


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        home=str(tmp_path.with_name(tmp_path.name + "_home")),
        max_bytes=LIMIT,
        fetch_timeout_s=10.0,
        event_lease_s=5.0,
    )


def _secret_hits(settings: Settings, tenant: str) -> list[str]:
    hits = hybrid_query(
        settings, "vault combination seven", groups=["everyone", "staff"], tenant_id=tenant, k=20
    )
    return [h.text for h in hits if "vault" in h.text]


def _dead_letters(settings: Settings, tenant: str) -> dict[str, str]:
    """Open dead letters of the tenant: {object id or uri: error class}."""
    cat = open_catalog(settings)
    try:
        rows = cat.dead_letters.list_dead_letters(tenant_id=tenant, limit=1000)
    finally:
        cat.close()
    return {_object_name(r.doc_id, r.uri): r.error_class for r in rows}


def _status(settings: Settings, name: str) -> str:
    """The status of tenant A's document ``name`` (an event's object id)."""
    cat = open_catalog(settings)
    try:
        row = cat.documents.get_document(ids.doc_id("tenant-a", "a-docs", name))
    finally:
        cat.close()
    return row.status if row is not None else "missing"


def _object_name(doc_id: str, uri: str) -> str:
    """The event's object id when the dead letter is one of the events below
    (ragsync's document id hashes it), else the file's name."""
    names = {ids.doc_id("tenant-a", "a-docs", name): name for name in EVENT_NAMES}
    return names.get(doc_id) or Path(uri).name


EVENT_NAMES = ("good", "alias", "passwd", "dotdot", "encoded", "other-tenant", "leak", "zero", "pipe", "big")


def test_events_naming_anything_outside_the_location_become_dead_letters(tmp_path: Path) -> None:
    world = _world(tmp_path)
    settings = _settings(tmp_path)
    prepare_stores(settings, default_model())
    register_source(settings, "a-docs", "tenant-a", "object_store", str(world["a"]))
    register_source(settings, "b-docs", "tenant-b", "object_store", str(world["b"]))
    a = world["a"]
    targets = {
        "good": f"file://{a}/good.md",
        "alias": str(a / "alias.md"),
        "passwd": "file:///etc/passwd",
        "dotdot": f"{a}/../secret.md",
        "encoded": f"file://{a}/%2e%2e/secret.md",
        "other-tenant": str(world["b"] / "b-only.md"),
        "leak": str(a / "leak.md"),
        "zero": str(a / "zero.md"),
        "pipe": str(a / "pipe.md"),
        "big": str(a / "big.md"),
    }
    events = [
        {
            "source_id": "a-docs",
            "tenant_id": "tenant-a",
            "doc_id": name,
            "op": "upsert",
            "source_version": 1,
            "acl_groups": ["staff"],
            "content_uri": uri,
            "event_time": time.time() - 5,
        }
        for name, uri in targets.items()
    ]
    cat = open_catalog(settings)
    try:
        # Straight into the queue, as a Pub/Sub or Kafka message would arrive:
        # the stream itself must hold the boundary, not only the API.
        assert cat.queue.enqueue_events([parse_event(e) for e in events]) == (len(events), 0)
    finally:
        cat.close()
    summary = run_stream(settings, until_idle=True, show_progress=False)
    assert summary is not None
    # good and its in-root alias (the same bytes) are both live: the second
    # read is indexed too, or linked as an exact copy when the first was
    # written before it was read (the machine's load decides which).
    assert summary.events_applied == 2 and summary.documents_indexed in (1, 2)
    assert sorted(_status(settings, name) for name in ("good", "alias")) in (
        ["duplicate", "indexed"],
        ["indexed", "indexed"],
    )
    assert summary.dead_lettered == 8
    refused = {
        n: "invalid_event" for n in ("passwd", "dotdot", "encoded", "other-tenant", "leak", "zero", "pipe")
    }
    assert _dead_letters(settings, "tenant-a") == {**refused, "big": "too_large"}
    assert _secret_hits(settings, "tenant-a") == []
    hits = hybrid_query(settings, "summer holiday office", groups=["staff"], tenant_id="tenant-a", k=5)
    assert {h.doc_id for h in hits} and all("August" in h.text for h in hits)
    # A restart does not pick any of them up again.
    again = run_stream(settings, until_idle=True, show_progress=False)
    assert again is not None
    assert (again.events_applied, again.dead_lettered, again.documents_indexed) == (0, 0, 0)
    assert len(_dead_letters(settings, "tenant-a")) == 8


def test_a_backfill_of_a_hostile_folder_indexes_only_its_own_regular_files(tmp_path: Path) -> None:
    world = _world(tmp_path)
    (world["a"] / "sub").mkdir()
    os.symlink(world["b"], world["a"] / "sub" / "other-tenant")  # a folder link out of the root
    odd = os.fsencode(str(world["a"])) + b"/caf\xe9-notes.md"  # a name that is not UTF-8
    with open(odd, "wb") as fh:
        fh.write(b"# Cafe\n\nThe cafe on the ground floor opens at eight.\n")
    # Control characters in a name: read like any other (they were refused
    # as "outside the source's location").
    (world["a"] / "bike\tshed\nminutes\x1b.md").write_text(
        "# Bike shed\n\nThe bike shed is repainted in May.\n"
    )
    settings = _settings(tmp_path)
    summary = run_backfill(
        str(world["a"]), settings, tenant_id="tenant-a", acl_groups=["staff"], show_progress=False
    )
    # good.md, the non-UTF-8 and the control-character names are indexed and alias.md is linked to
    # good.md as its exact duplicate; every entry that is not read is a dead
    # letter with its reason (nothing vanishes from the listing unseen).
    assert (summary.documents_indexed, summary.documents_duplicate, summary.dead_lettered) == (3, 1, 5)
    assert _dead_letters(settings, "tenant-a") == {
        "leak.md": "invalid_event",
        "zero.md": "invalid_event",
        "pipe.md": "invalid_event",
        "other-tenant": "invalid_event",
        "big.md": "too_large",
    }
    assert _secret_hits(settings, "tenant-a") == []
    hits = hybrid_query(settings, "cafe ground floor", groups=["staff"], tenant_id="tenant-a", k=3)
    assert hits and "eight" in hits[0].text
    hits = hybrid_query(settings, "bike shed repainted", groups=["staff"], tenant_id="tenant-a", k=3)
    assert hits and "May" in hits[0].text


# ---------------------------------------------------------------------- the API


def test_the_api_refuses_outside_addresses_the_same_whether_they_exist(tmp_path: Path) -> None:
    world = _world(tmp_path)
    home = tmp_path / "home"
    app = create_app(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        allowed_locations=(f"{tmp_path}/{{tenant}}",),
        reserved_locations=(str(home),),
    )
    _, key_a = app.state.keys.create_tenant("a")
    app.state.keys.create_tenant("b")
    server = ExitStack()
    port = server.enter_context(served(app))
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key_a})
    try:
        # A tenant may declare its own folder, never another's or the host's.
        made = api.post(
            "/v1/sources",
            json={"type": "object_store", "sync": "webhook", "source_id": "docs", "uri": str(world["a"])},
        )
        assert made.status_code == 201, made.text
        for uri in (str(world["b"]), "/etc", str(tmp_path), f"{world['a']}/../b"):
            r = api.post("/v1/sources", json={"type": "object_store", "sync": "webhook", "uri": uri})
            assert (r.status_code, r.json()["error"]["details"][0]["loc"]) == (422, ["body", "uri"]), uri
            assert uri not in r.text

        def push(uri: str, doc_id: str = "x") -> httpx.Response:
            body = {
                "source_id": "docs",
                "doc_id": doc_id,
                "op": "upsert",
                "source_version": 1,
                "acl_groups": ["staff"],
                "content_uri": uri,
                "event_time": "2026-12-01T10:00:00Z",
            }
            return api.post("/internal/events", json=body)

        pairs = [  # (an address that exists, one that does not): identical answers
            ("file:///etc/passwd", "file:///etc/no-such-file"),
            (f"{world['a']}/../secret.md", f"{world['a']}/../no-such.md"),
            (f"file://{world['a']}/%2E%2E/secret.md", f"file://{world['a']}/%2E%2E/none.md"),
            (str(world["b"] / "b-only.md"), str(world["b"] / "none.md")),
        ]
        for present, absent in pairs:
            r1, r2 = push(present), push(absent)
            assert r1.status_code == r2.status_code == 422, (r1.text, r2.text)
            assert r1.json()["error"]["details"][0]["loc"] == ["body", "content_uri"]
            shape = [
                r.json()["error"]["message"].replace(u, "ADDR") for r, u in ((r1, present), (r2, absent))
            ]
            assert shape[0] == shape[1], shape
        # Inside the location, even a missing file is accepted: existence is
        # only ever checked by the reader, whose answer becomes a dead letter.
        good = push(str(world["a"] / "good.md"))
        assert good.json().get("accepted") == 1, good.text
        assert push(str(world["a"] / "later.md"), "later").json()["accepted"] == 1
        assert app.state.catalog.queue_views.queue_stats()["depth"] == 2
    finally:
        api.close()
        server.close()
        app.state.catalog.close()


def test_every_refused_location_gets_the_same_answer_so_the_state_cannot_be_found(tmp_path: Path) -> None:
    """The red team's LOW: a location under ragsync's own state got its own
    message ("outside ragsync's own state"), any other refused one another:
    trying locations told a tenant where the state lives."""
    grants = tmp_path / "grants"
    mine = grants / "a"
    home = mine / "state"  # the worst case: the operator's home inside a tenant's grant
    (home / "objects").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mine / "to-state").symlink_to(home / "objects")
    (mine / "to-elsewhere").symlink_to(elsewhere)
    (mine / "docs").mkdir()
    app = create_app(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        allowed_locations=(f"{grants}/{{tenant}}",),
        reserved_locations=(str(home),),
    )
    _, key = app.state.keys.create_tenant("a")
    refused = [
        home,  # ragsync's state itself
        home / "objects" / "raw",  # inside it
        mine,  # containing it
        mine / "to-state",  # a link into it
        elsewhere,  # outside the grant, existing
        tmp_path / "no-such-folder",  # outside the grant, missing
        mine / "to-elsewhere",  # a link out of the grant
        "/etc",
        "relative/folder",
        "/proc/self",
    ]
    with served(app) as port:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key})
        try:
            answers = set()
            for uri in refused:
                r = api.post("/v1/sources", json={"type": "object_store", "sync": "webhook", "uri": str(uri)})
                assert r.status_code == 422, (uri, r.text)
                assert str(uri) not in r.text
                answers.add(json.dumps(r.json(), sort_keys=True))
            assert len(answers) == 1, answers
            ok = api.post(
                "/v1/sources", json={"type": "object_store", "sync": "webhook", "uri": str(mine / "docs")}
            )
            assert ok.status_code == 201, ok.text
        finally:
            api.close()
            app.state.catalog.close()


# ------------------------------------------------------------ one hostile document


def test_deeply_nested_html_is_a_clean_dead_letter_and_the_cli_prints_it(tmp_path: Path) -> None:
    """The red team's LOW: deeply nested tags (200,000 there; 5,000 here, the
    same failure well past Python's recursion limit) ended as ``internal``
    and ``ragsync parse`` printed a traceback."""
    import subprocess

    from ragsync.errors import TooLargeError
    from ragsync.parsing import parse
    from tests.proc import CLI

    page = b"<html><body>" + b"<div>" * 5_000 + b"deep text" + b"</div>" * 5_000 + b"</body></html>"
    with pytest.raises(TooLargeError) as caught:
        parse(page, "text/html", filename="deep.html")
    assert caught.value.error_class == "too_large"
    assert str(caught.value) == "HTML elements nested deeper than 256 levels (not read)"
    # A page just inside the limit is read.
    ok = b"<html><body>" + b"<div>" * 250 + b"deep text" + b"</div>" * 250 + b"</body></html>"
    assert [e.text for e in parse(ok, "text/html", filename="ok.html").elements] == ["deep text"]
    (tmp_path / "deep.html").write_bytes(page)
    run = subprocess.run(
        [*CLI, "parse", str(tmp_path / "deep.html")], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in run.stdout + run.stderr
    assert "dead letter [too_large]: HTML elements nested deeper than 256 levels" in run.stdout + run.stderr


def test_a_flate_bomb_pdf_is_refused_in_bounded_memory() -> None:
    """The red team's MEDIUM: a small PDF whose stream inflates ~1000x took
    gigabytes. Refused as ``archive_bomb`` after inflating at most the limit,
    holding at most a block at a time."""
    import tracemalloc

    from ragsync.errors import ArchiveBombError
    from ragsync.parsing import parse
    from ragsync.parsing.pdf import check_stream_expansion

    bomb = flate_bomb_pdf(100)  # ~100 KB on disk, 100 MiB decoded
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveBombError) as caught:
            parse(bomb, "application/pdf", filename="bomb.pdf")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.error_class == "archive_bomb"
    assert peak < 8 * len(bomb) + (4 << 20)
    # Under the 64 MiB floor the ratio is not judged: 8 MiB of spaces is counted, then parsed.
    assert check_stream_expansion(flate_bomb_pdf(8)) == 8 << 20


def _bomb_folder(tmp_path: Path) -> Path:
    """A folder holding the red team's bomb (a ~1.6 MB PDF whose content
    stream inflates to 1.5 GiB, made at test time) beside a good document."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bomb.pdf").write_bytes(flate_bomb_pdf(1536))
    (folder / "good.md").write_text(GOOD)
    assert (folder / "bomb.pdf").stat().st_size < 2_000_000
    return folder


@pytest.mark.parametrize(
    ("limits", "memory_mb", "outcome"),
    [
        # The expansion limits (512 MiB decoded) refuse it before PDFium opens it.
        ((), 2048, "archive_bomb"),
        # Expansion limits raised past it: PDFium inflates it, in the bounded
        # child, whose 2 GiB heap ends it.
        (("--max-archive-bytes", str(8 << 30), "--max-archive-ratio", "100000"), 2048, "crash"),
    ],
    ids=["expansion-limit", "memory-limit"],
)
def test_a_flate_bomb_is_decoded_only_in_a_bounded_child(
    tmp_path: Path, limits: tuple[str, ...], memory_mb: int, outcome: str
) -> None:
    """The red team's MEDIUM: the bomb was dead-lettered, but the sync process
    peaked at 3.0 GB and ``ragsync parse`` at 2.67 GB: the look for scanned
    pages (``needs_ocr`` through PDFium) inflated it in the pipeline process,
    outside the parse child's memory limit. Now every process of a backfill
    and of ``ragsync parse`` stays under the parse child's limit, and the bomb
    is one dead letter of its detection."""
    folder = _bomb_folder(tmp_path)
    home = tmp_path / "home"
    bounds = ("--parse-memory-mb", str(memory_mb), *limits)
    env = {**os.environ, "RAGSYNC_HOME": str(home)}
    run, peaks = run_watching_memory(cli("backfill", str(folder), "--json", "--quiet", *bounds), env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {k: v for k, v in peaks.items() if v >= memory_mb} == {}, peaks
    settings = Settings(home=str(home))
    cat = open_catalog(settings)
    try:
        letters = [
            (Path(r.uri).name, r.stage, r.error_class) for r in cat.dead_letters.list_dead_letters(limit=10)
        ]
    finally:
        cat.close()
    assert letters == [("bomb.pdf", "detect", outcome)]
    assert [h.text for h in hybrid_query(settings, "office closes August", groups=["everyone"])][:1] == [
        "The office closes on the first Monday of August for the summer holiday."
    ]
    parsed, peaks = run_watching_memory(cli("parse", str(folder / "bomb.pdf"), "--json", *bounds), env)
    assert parsed.returncode == 2, parsed.stderr[-3000:]
    assert "Traceback" not in parsed.stdout + parsed.stderr
    assert {k: v for k, v in peaks.items() if v >= memory_mb} == {}, peaks
    assert json.loads(parsed.stdout)["error"]["class"] == outcome


def test_an_email_with_thousands_of_attachments_ends_quickly_with_a_clear_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The red team's MEDIUM: a 5,000-attachment e-mail took 25 minutes and
    3 GB (each attachment a child document). Past ``max_attachments`` (500)
    the message is indexed, none of its attachments is decoded or returned,
    and it names why (1,000 here: the same rule, a shorter test). What is
    asserted is the work not done (no attachment decoded), not a time, which
    load could break."""
    from ragsync.parsing import email as email_parser
    from ragsync.parsing import parse
    from ragsync.parsing.archive import ArchiveLimits

    decoded: list[str] = []
    real_bytes = email_parser._attachment_bytes

    def counted(part: object) -> bytes:
        decoded.append(str(part.get_filename()))  # type: ignore[attr-defined]
        return real_bytes(part)

    monkeypatch.setattr(email_parser, "_attachment_bytes", counted)

    def message(n: int) -> bytes:
        head = b'MIME-Version: 1.0\nSubject: Scans\nContent-Type: multipart/mixed; boundary="b"\n\n'
        parts = [b"--b\nContent-Type: text/plain\n\nScans attached.\n"] + [
            b'--b\nContent-Type: text/plain\nContent-Disposition: attachment; filename="scan-%d.txt"\n\n'
            b"page %d\n" % (i, i)
            for i in range(n)
        ]
        return head + b"".join(parts) + b"--b--\n"

    flood = parse(message(1_000), "message/rfc822", filename="flood.eml")
    assert decoded == []
    assert flood.attachments == ()
    assert flood.metadata["attachments"] == "1000"
    assert flood.metadata["attachments_skipped"].startswith(
        "1000 attachments, above the limit of 500 per message: scan-0.txt, scan-1.txt"
    )
    few = parse(message(3), "message/rfc822", filename="few.eml", limits=ArchiveLimits(max_attachments=3))
    assert [a.name for a in few.attachments] == ["scan-0.txt", "scan-1.txt", "scan-2.txt"]
    assert decoded == ["scan-0.txt", "scan-1.txt", "scan-2.txt"]  # the count is of real decodes
    assert "attachments_skipped" not in few.metadata


def test_children_past_the_time_budget_per_parent_are_dead_letters_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """Issue #29: a time budget per parent. With a budget no parse fits in,
    the e-mail is indexed with its first attachment (the first child is
    always parsed), its other attachments are ``too_large`` dead letters
    naming the budget, and the other document of the run is indexed."""
    folder = tmp_path / "mail"
    folder.mkdir()
    head = b'MIME-Version: 1.0\nSubject: Minutes\nContent-Type: multipart/mixed; boundary="b"\n\n'
    parts = [b"--b\nContent-Type: text/plain\n\nThe minutes are attached.\n"] + [
        b'--b\nContent-Type: text/plain\nContent-Disposition: attachment; filename="minutes-%d.txt"\n\n'
        b"Minutes of the meeting number %d about the budget.\n" % (i, i)
        for i in range(4)
    ]
    (folder / "minutes.eml").write_bytes(head + b"".join(parts) + b"--b--\n")
    (folder / "good.md").write_text(GOOD)
    settings = Settings(home=str(tmp_path.with_name(tmp_path.name + "_home")), max_children_s=1e-9)
    summary = run_backfill(
        str(folder), settings, tenant_id="tenant-a", acl_groups=["staff"], show_progress=False
    )
    # minutes.eml, its first attachment and good.md indexed; 3 attachments dead-lettered.
    assert (summary.documents_indexed, summary.dead_lettered) == (3, 3)
    assert _dead_letters(settings, "tenant-a") == {
        f"minutes.eml#minutes-{i}.txt": "too_large" for i in (1, 2, 3)
    }
    cat = open_catalog(settings)
    try:
        messages = {r.message for r in cat.dead_letters.list_dead_letters(tenant_id="tenant-a", limit=10)}
    finally:
        cat.close()
    assert all("time budget of 1e-09 s per parent" in m for m in messages), messages
    hits = hybrid_query(settings, "summer holiday office", groups=["staff"], tenant_id="tenant-a", k=3)
    assert hits and "August" in hits[0].text


def test_a_sync_lists_links_leaving_the_grant_as_dead_letters_whether_or_not_their_target_exists(
    tmp_path: Path,
) -> None:
    """Issue #29: a link leaving a grant is skipped with a dead letter at
    listing. Tenant A's granted folder holds links to tenant B's folder and
    file, to ragsync's own object store and to an outside path that does not
    exist: each is reported once as an ``invalid_event`` saying it is outside
    the source's location (the missing target included: no oracle), none is
    read, and A's own file is indexed."""
    world = _world(tmp_path)
    grant = tmp_path / "grant-a"
    grant.mkdir()
    (grant / "good.md").write_text(GOOD)
    settings = _settings(tmp_path)
    settings.ensure_home()
    os.makedirs(settings.object_store, exist_ok=True)
    links = {
        "to-b": world["b"],  # another tenant's folder
        "b-file.md": world["b"] / "b-only.md",  # another tenant's file
        "store": Path(settings.object_store),  # ragsync's own store
        "ghost.md": tmp_path / "nowhere" / "missing.md",  # an outside path that does not exist
    }
    for name, target in links.items():
        os.symlink(target, grant / name)
    register_source(
        settings, "a-docs", "tenant-a", "object_store", str(grant), options={"acl_groups": ["staff"]}
    )
    from beam_pipelines.sync import run_sync

    result = run_sync("a-docs", settings, tenant_id="tenant-a", full=True, show_progress=False)
    totals = result.totals()
    assert (totals["documents_listed"], totals["documents_indexed"], totals["dead_lettered"]) == (5, 1, 4)
    assert _dead_letters(settings, "tenant-a") == dict.fromkeys(links, "invalid_event")
    cat = open_catalog(settings)
    try:
        rows = cat.dead_letters.list_dead_letters(tenant_id="tenant-a", limit=10)
    finally:
        cat.close()
    assert sorted((r.stage, r.message) for r in rows) == sorted(
        ("fetch", f"OutsideLocationError(\"content_uri '{grant / name}' is outside the source's location\")")
        for name in links
    )
    assert _secret_hits(settings, "tenant-a") == []
    hits = hybrid_query(settings, "summer holiday office", groups=["staff"], tenant_id="tenant-a", k=3)
    assert hits and "August" in hits[0].text
