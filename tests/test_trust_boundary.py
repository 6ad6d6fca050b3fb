"""The trust boundary, attacked: a source's reader reads only regular files
under the source's location, within byte and time limits, and says the same
thing about an outside address whether or not something exists there.

These are fast tests of ``connectors.location`` and ``connectors.reader``;
the pipeline-level attacks (events through the stream, a hostile folder
through a backfill, the API) are in ``tests/test_hostile_inputs.py``.
"""

from __future__ import annotations

import ast
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from connectors.base import FileInfo
from connectors.location import Location, source_location
from connectors.reader import ContentReader, FetchLimits
from ragsync.errors import (
    ConfigurationError,
    FetchError,
    FetchTimeoutError,
    OutsideLocationError,
    TooLargeError,
)

ROOT = Path(__file__).resolve().parents[1]
SECRET = "the-launch-code-is-7731"


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Path]:
    """Two tenants' folders side by side, a secret outside both, and some
    hostile entries inside tenant A's folder."""
    a = tmp_path / "tenant-a"
    b = tmp_path / "tenant-b"
    outside = tmp_path / "outside"
    for d in (a / "docs", b, outside):
        d.mkdir(parents=True)
    (a / "docs" / "ok.txt").write_text("tenant A's own note")
    (a / "docs" / "other.txt").write_text("also A's")
    (b / "b-secret.txt").write_text(f"tenant B: {SECRET}")
    (outside / "secret.txt").write_text(SECRET)
    (a / "link-out").symlink_to(outside / "secret.txt")
    (a / "link-out-missing").symlink_to(outside / "nothing-here.txt")
    (a / "link-in").symlink_to(a / "docs" / "ok.txt")
    (a / "dir-out").symlink_to(outside)
    (a / "loop1").symlink_to(a / "loop2")
    (a / "loop2").symlink_to(a / "loop1")
    (a / "zero").symlink_to("/dev/zero")
    os.mkfifo(a / "fifo")
    return {"a": a, "b": b, "outside": outside, "tmp": tmp_path}


def _reader(root: Path, **limits: float) -> ContentReader:
    return ContentReader(Location.parse(str(root)), FetchLimits(**limits) if limits else None)  # type: ignore[arg-type]


def _refusal(reader: ContentReader, uri: str) -> str:
    with pytest.raises(OutsideLocationError) as info:
        reader.read(uri)
    return str(info.value)


def test_own_files_are_read_by_path_relative_path_and_file_uri(world: dict[str, Path]) -> None:
    reader = _reader(world["a"])
    own = world["a"] / "docs" / "ok.txt"
    expected = b"tenant A's own note"
    assert reader.read(str(own)) == expected
    assert reader.read("docs/ok.txt") == expected
    assert reader.read(f"file://{own}") == expected
    assert reader.read(f"file://localhost{own}") == expected
    assert reader.read(f"FILE://{own}") == expected
    assert reader.read(f"file://{own}".replace("ok.txt", "%6Fk.txt")) == expected  # percent-encoded 'o'
    assert reader.read(str(world["a"]) + "//docs/./../docs/ok.txt") == expected
    assert reader.read(str(world["a"] / "link-in")) == expected  # a link that stays inside is fine


@pytest.mark.parametrize(
    "attack",
    [
        "/etc/passwd",
        "file:///etc/passwd",
        "file://localhost/etc/passwd",
        "FILE:///etc/passwd",
        "File://LOCALHOST/etc/passwd",
        "file://evil.example.com/etc/passwd",
        "/proc/self/environ",
        "file:///proc/self/environ",
        "{a}/../outside/secret.txt",
        "{a}/docs/../../outside/secret.txt",
        "../outside/secret.txt",
        "docs/../../outside/secret.txt",
        "file://{a}/%2e%2e/outside/secret.txt",
        "file://{a}/docs/%2E%2E/%2E%2E/outside/secret.txt",
        "file://{a}%2F..%2Foutside%2Fsecret.txt",
        "{a}-evil/secret.txt",  # a sibling whose name starts with the root's
        "{b}/b-secret.txt",  # another tenant's folder
        "{a}/link-out",  # a symlink leaving the root
        "{a}/link-out-missing",
        "{a}/dir-out/secret.txt",  # through a symlinked directory
        "{a}/loop1",  # a symlink loop
        "{a}/zero",  # a device, through a link inside the root
        "{a}/fifo",  # must not hang
        "{a}/docs",  # a directory
        "s3://bucket/key",
        "http://169.254.169.254/latest/meta-data/",
        "{a}/docs/ok.txt\x00.pdf",
        "{a}/" + "x/" * 3000 + "ok.txt",  # very long path
    ],
)
def test_attacks_are_refused_and_nothing_outside_is_read(world: dict[str, Path], attack: str) -> None:
    reader = _reader(world["a"])
    uri = attack.format(a=world["a"], b=world["b"])
    # In a thread: a read that blocks (a FIFO opened without O_NONBLOCK waits
    # for a writer for ever) fails the test instead of hanging it. The bound
    # only tells "returned" from "blocked"; how fast is not asserted.
    outcome: dict[str, object] = {}

    def read() -> None:
        try:
            outcome["read"] = reader.read(uri)
        except OutsideLocationError as exc:
            outcome["refused"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["failed"] = exc

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), f"reading {uri!r} blocked"
    assert set(outcome) == {"refused"}, outcome
    message = str(outcome["refused"])
    assert SECRET not in message
    assert "outside the source's location" in message


def test_the_answer_is_the_same_whether_the_outside_path_exists_or_not(world: dict[str, Path]) -> None:
    reader = _reader(world["a"])
    out = world["outside"]

    def shape(uri: str) -> str:
        return _refusal(reader, uri).replace(uri, "<uri>")

    assert shape(str(out / "secret.txt")) == shape(str(out / "missing.txt"))
    assert shape(str(world["a"] / "link-out")) == shape(str(world["a"] / "link-out-missing"))
    assert shape("/etc/passwd") == shape("/etc/no-such-file-here")
    assert shape("/root/.ssh/id_rsa") == shape("/root/.ssh/no_such_key")


def test_a_directory_swapped_for_a_symlink_between_check_and_open_is_caught(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, outside = world["a"], world["outside"]
    (a / "sub").mkdir()
    (a / "sub" / "secret.txt").write_text("harmless")
    real_open = os.open

    def swapping_open(path: str, flags: int, *args: int) -> int:
        # The attacker wins the race: after the path was checked, the
        # directory becomes a link to the outside, whose file has the same name.
        if str(path).endswith("sub/secret.txt") and (a / "sub").is_dir() and not (a / "sub").is_symlink():
            (a / "sub" / "secret.txt").unlink()
            (a / "sub").rmdir()
            (a / "sub").symlink_to(outside)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", swapping_open)
    reader = _reader(a)
    message = _refusal(reader, str(a / "sub" / "secret.txt"))
    assert SECRET not in message


def test_byte_limit_is_enforced_without_reading_past_it(world: dict[str, Path]) -> None:
    big = world["a"] / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(10 * 1024**3)  # a 10 GiB sparse file: refused from its size, not read
    reader = _reader(world["a"], max_bytes=1024 * 1024)
    with pytest.raises(TooLargeError, match="above the 1048576-byte limit"):
        reader.read(str(big))
    (world["a"] / "exact.bin").write_bytes(b"x" * 1024 * 1024)
    assert len(reader.read(str(world["a"] / "exact.bin"))) == 1024 * 1024


class _EndlessFs:
    """A FileSystem whose objects report no size and never end (like a
    misbehaving object store), counting the bytes handed out."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.served = 0
        self.delay_s = delay_s

    def match(self, pattern: str) -> list[FileInfo]:
        return [FileInfo(path=pattern, size=-1, mtime=0.0)]

    def open(self, path: str) -> io.BufferedIOBase:
        fs = self

        class Endless(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, b: bytearray) -> int:  # type: ignore[override]
                time.sleep(fs.delay_s)
                n = len(b)
                b[:n] = b"z" * n
                fs.served += n
                return n

        return io.BufferedReader(Endless())

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base, *parts])


def test_object_store_reads_stop_at_the_byte_limit_and_the_time_limit() -> None:
    fs = _EndlessFs()
    reader = ContentReader(Location.parse("s3://corp-docs/tenant-a"), FetchLimits(max_bytes=3_000_000), fs)
    with pytest.raises(TooLargeError):
        reader.read("s3://corp-docs/tenant-a/stream.bin")
    assert fs.served <= 3_000_000 + 2 * 1024 * 1024  # at most one block past the limit
    slow = _EndlessFs(delay_s=0.05)
    reader = ContentReader(Location.parse("s3://corp-docs/tenant-a"), FetchLimits(timeout_s=0.3), slow)
    with pytest.raises(FetchTimeoutError):
        reader.read("tenant-a-file.bin")
    with pytest.raises(OutsideLocationError):
        reader.read("s3://corp-docs/tenant-b/x")
    with pytest.raises(OutsideLocationError):
        reader.read("s3://corp-docs/tenant-a/../tenant-b/x")
    with pytest.raises(OutsideLocationError):
        reader.read("gs://corp-docs/tenant-a/x")


def test_a_missing_file_inside_the_location_is_a_retryable_fetch_error(world: dict[str, Path]) -> None:
    with pytest.raises(FetchError) as info:
        _reader(world["a"]).read(str(world["a"] / "docs" / "gone.txt"))
    assert not isinstance(info.value, OutsideLocationError)


def test_walk_lists_only_regular_files_inside_the_root(world: dict[str, Path]) -> None:
    reader = _reader(world["a"])
    listed = sorted(os.path.relpath(p, reader.real_root) for p, _ in reader.walk())
    # link-in is inside the root (listed, as its own name); links out, the
    # loop, the device link, the FIFO and the symlinked directory are not.
    assert listed == ["docs/ok.txt", "docs/other.txt", "link-in"]


def test_walk_reports_every_link_leaving_the_root_whether_or_not_its_target_exists(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "ok.txt").write_text("ok")
    (outside / "there.txt").write_text("x")
    os.symlink(outside / "there.txt", root / "to-existing")
    os.symlink(outside / "missing.txt", root / "to-missing")  # skipping only this one was an oracle
    os.symlink(root / "gone.txt", root / "dangling-inside")  # inside the root: nothing to report
    reader = _reader(root)
    walked = [(os.path.basename(p), st is not None) for p, st in reader.walk(include_refused=True)]
    assert walked == [("ok.txt", True), ("to-existing", False), ("to-missing", False)]
    assert [os.path.basename(p) for p, _ in reader.walk()] == ["ok.txt"]


def test_walk_of_a_missing_root_fails_instead_of_listing_nothing(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="cannot list"):
        list(_reader(tmp_path / "nope").walk())


@pytest.mark.parametrize(
    "uri",
    ["/", "/proc", "/sys/kernel", "/dev", "relative/folder", "s3://", "ftp://x/y", "https://u:p@host/api"],
)
def test_unusable_locations_are_refused(uri: str) -> None:
    with pytest.raises(ConfigurationError):
        Location.parse(uri)


def test_a_source_location_may_not_overlap_ragsyncs_own_state(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(ConfigurationError, match="is refused as a source location"):
        source_location(str(home / "objects" / "parsed"), reserved=(str(home),))
    with pytest.raises(ConfigurationError, match="is refused as a source location"):
        source_location(str(tmp_path), reserved=(str(home),))
    assert source_location(str(tmp_path / "docs"), reserved=(str(home),)).root == str(tmp_path / "docs")


def test_http_locations_confine_host_scheme_port_and_path() -> None:
    loc = Location.parse("https://wiki.example.com/w/api.php")
    assert loc.resolve("https://WIKI.example.com:443/w/api.php?action=query") == (
        "https://wiki.example.com/w/api.php?action=query"
    )
    for bad in (
        "http://wiki.example.com/w/api.php",
        "https://wiki.example.com:8443/w/api.php",
        "https://wiki.example.com.evil.com/w/api.php",
        "https://evil.com/w/api.php",
        "https://wiki.example.com/w/api.php/../../admin",
        "https://user@wiki.example.com/w/api.php",
        "https://wiki.example.com/w/api.php%2F..%2F..%2Fadmin",
    ):
        assert not loc.contains(bad), bad


def test_nothing_but_the_reader_opens_source_content() -> None:
    """Content (``SourceFile.uri``, ``content_uri``) is opened only in
    connectors/reader.py: the fetch stage and the connectors call it."""
    openers = {"open", "read_bytes", "read_text"}
    offenders = []
    for package in ("transforms", "connectors"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "reader.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    text = ast.unparse(node)
                    if any(f"{o}(" in text for o in openers) and (".uri" in text or "content_uri" in text):
                        offenders.append(f"{path.relative_to(ROOT)}: {text}")
    assert offenders == []


def test_concurrent_reads_of_one_reader_are_independent(world: dict[str, Path]) -> None:
    reader = _reader(world["a"])
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(reader.read("docs/ok.txt"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [b"tenant A's own note"] * 8


def test_pseudo_file_systems_are_recognised_from_the_open_file() -> None:
    """/proc files pass S_ISREG; the reader also checks the file system type
    of the open file, so a bind mount of /proc inside a root is refused too."""
    from connectors.reader import _PSEUDO_FS, _fs_type

    fd = os.open("/proc/self/status", os.O_RDONLY)
    try:
        assert _PSEUDO_FS.get(_fs_type(fd) or 0) == "proc"
    finally:
        os.close(fd)
    fd = os.open(__file__, os.O_RDONLY)
    try:
        assert _fs_type(fd) not in _PSEUDO_FS
    finally:
        os.close(fd)


# -- credentials: a tenant names only its own secret store -----------------------------------


class _Recorder:
    """A loopback HTTP server standing in for a host; records the Authorization
    header of every request and answers with ``answer(path)``: (status, headers, body)."""

    def __init__(self, answer: Any) -> None:
        import http.server

        seen = self.seen = []  # type: list[tuple[str, str]]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                seen.append((self.path, self.headers.get("Authorization", "")))
                status, headers, body = answer(self.path)
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_tenant_cannot_make_the_server_send_its_own_secrets_to_the_tenants_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's CRITICAL: a wiki source under the tenant's granted URL with
    ``credentials_ref`` env://ANY or file:///any/file. Refused at creation, with
    one wording; the tenant's host never sees a server secret."""
    httpx = pytest.importorskip("httpx")
    from control_plane.app import create_app
    from tests.serving import served

    monkeypatch.setenv("RAGSYNC_METRICS_TOKEN", SECRET)
    host_file = tmp_path / "operator-secret"
    host_file.write_text(SECRET + "\n")
    stores = tmp_path / "secrets"
    (stores / "t1").mkdir(parents=True)
    (stores / "t1" / "wiki").write_text("Bearer t1-own-token\n")
    (stores / "t1" / "escape").symlink_to(host_file)
    tenant_host = _Recorder(lambda path: (200, {"Content-Type": "application/json"}, b"{}"))
    app = create_app(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        allowed_locations=(tenant_host.origin + "/{tenant}",),
        secret_stores=(f"file://{stores}/{{tenant}}", "secretmanager://projects/p/secrets/{tenant}"),
    )
    _, key = app.state.keys.create_tenant("t1")
    refs = {
        "env://RAGSYNC_METRICS_TOKEN": 422,
        "env://NO_SUCH_VARIABLE": 422,
        f"file://{host_file}": 422,
        f"file://{tmp_path}/no-such-file": 422,
        f"file://{stores}/t1/escape": 422,  # a link in the tenant's store leaving it
        f"file://{stores}/t2/wiki": 422,  # another tenant's store
        "secretmanager://projects/p/secrets/t2_wiki": 422,
        "secretmanager://projects/other/secrets/t1_wiki": 422,
        "secretmanager://projects/p/secrets/t1_wiki": 201,
        f"file://{stores}/t1/wiki": 201,
    }
    try:
        with (
            served(app) as port,
            httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key}) as client,
        ):
            answers = {}
            for n, ref in enumerate(refs):
                body = {"type": "wiki", "uri": f"{tenant_host.origin}/t1/api.php", "sync": "poll"}
                r = client.post("/v1/sources", json={**body, "credentials_ref": ref, "source_id": f"w{n}"})
                answers[ref] = r.status_code
                if r.status_code == 422:
                    # One wording, whatever exists on the host; the reference is not echoed.
                    assert r.json()["error"]["message"] == (
                        "credentials_ref: cannot be used: no readable secret of this tenant is there "
                        "(the operator lists your secret stores)"
                    )
        assert answers == refs
        stored = {s.credentials_ref for s in app.state.catalog.syncs.source_states("t1")}
        assert not [ref for ref in stored if ref.startswith("env://") or SECRET in ref]
        assert tenant_host.seen == []
    finally:
        tenant_host.close()
        app.state.catalog.close()


def test_every_credential_failure_has_one_wording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No oracle: a missing variable, a missing file, an unreadable one, a
    directory, a forbidden reference and a multi-line secret read alike."""
    from connectors.credentials import resolve_secret

    monkeypatch.setenv("RAGSYNC_TWO_LINES", "Bearer a\r\nX-Evil: 1")
    unreadable = tmp_path / "unreadable"
    unreadable.write_text("Bearer x")
    unreadable.chmod(0)
    grants = (f"file://{tmp_path}/{{tenant}}",)
    failures = [
        ("env://RAGSYNC_NO_SUCH_VARIABLE", None),
        ("env://RAGSYNC_TWO_LINES", None),
        (f"file://{tmp_path}/missing", None),
        (f"file://{tmp_path}", None),
        ("vault://kv/x", None),
        ("env://HOME", grants),  # exists, but never a tenant's
        (f"file://{unreadable}", grants),  # exists, outside the tenant's folder
        (f"file://{tmp_path}/t1/missing", grants),
    ]
    if os.geteuid() != 0:
        failures.append((f"file://{unreadable}", None))
    messages = set()
    for ref, tenant_grants in failures:
        with pytest.raises(ConfigurationError) as caught:
            resolve_secret(ref, tenant_grants=tenant_grants, tenant_id="t1")
        messages.add(str(caught.value).replace(repr(ref), "REF"))
    assert messages == {"credentials_ref REF cannot be used: no readable secret of this tenant is there"}


def test_secret_names_of_one_tenant_never_fall_under_anothers_prefix() -> None:
    from connectors.credentials import tenant_may_use

    stores = ("secretmanager://projects/p/secrets/{tenant}",)
    ref = "secretmanager://projects/p/secrets/{}"
    assert tenant_may_use(ref.format("a_b_token"), stores, "a_b")
    assert not tenant_may_use(ref.format("a_b_token"), stores, "a")  # tenant a_b's, not a's
    assert tenant_may_use(ref.format("a_token-2/versions/3"), stores, "a")
    assert not tenant_may_use(ref.format("a_"), stores, "a")
    assert not tenant_may_use("env://A_TOKEN", stores + ("env://{tenant}",), "a")
    assert tenant_may_use("", (), "a")  # a public source


def test_secret_manager_versions_are_read_with_the_documented_rest_call() -> None:
    """Recorded answers of ``GET v1/projects/P/secrets/S/versions/V:access``
    (the shape Google documents: ``payload.data`` base64, ``dataCrc32c``)."""
    httpx = pytest.importorskip("httpx")
    from connectors.credentials import resolve_secret

    calls: list[tuple[str, str]] = []
    recorded = {
        "/v1/projects/p/secrets/t1_wiki/versions/latest:access": (
            200,
            {
                "name": "projects/123456/secrets/t1_wiki/versions/2",
                "payload": {"data": "QmVhcmVyIHQxLXRva2Vu", "dataCrc32c": "2702512574"},
            },
        ),
        "/v1/projects/p/secrets/t1_gone/versions/1:access": (
            404,
            {
                "error": {
                    "code": 404,
                    "message": "Secret Version [projects/123456/secrets/t1_gone/versions/1] not found.",
                    "status": "NOT_FOUND",
                }
            },
        ),
        "/v1/projects/p/secrets/t1_denied/versions/latest:access": (
            403,
            {
                "error": {
                    "code": 403,
                    "message": "Permission 'secretmanager.versions.access' denied for "
                    "resource 'projects/p/secrets/t1_denied/versions/latest' (or it may not exist).",
                    "status": "PERMISSION_DENIED",
                }
            },
        ),
    }

    def answer(request: Any) -> Any:
        calls.append((request.url.path, request.headers.get("authorization", "")))
        status, body = recorded[request.url.path]
        return httpx.Response(status, json=body)

    transport = httpx.MockTransport(answer)
    grants = ("secretmanager://projects/p/secrets/{tenant}",)
    kwargs: dict[str, Any] = {"tenant_grants": grants, "tenant_id": "t1", "transport": transport}
    ref = "secretmanager://projects/p/secrets/t1_"
    assert resolve_secret(ref + "wiki", token=lambda: "ya29.sa", **kwargs) == "Bearer t1-token"
    errors = set()
    for name in ("gone/versions/1", "denied"):
        with pytest.raises(ConfigurationError) as caught:
            resolve_secret(ref + name, token=lambda: "ya29.sa", **kwargs)
        errors.add(str(caught.value).replace(ref + name, "REF"))
    assert errors == {"credentials_ref 'REF' cannot be used: no readable secret of this tenant is there"}
    assert [c[1] for c in calls] == ["Bearer ya29.sa"] * 3
    assert len(calls) == 3


def test_credentials_never_follow_a_redirect_to_another_origin() -> None:
    """The source's host redirects to another origin (another port on
    loopback): the Authorization header is never sent there."""
    other = _Recorder(lambda path: (200, {}, b"stolen"))
    source = _Recorder(lambda path: (302, {"Location": other.origin + "/collect"}, b""))
    from connectors.reader import LocatedHttpClient

    client = LocatedHttpClient(
        Location.parse(source.origin + "/w"), headers={"Authorization": "Bearer s3cr3t"}
    )
    try:
        with pytest.raises(OutsideLocationError):
            client.get("api.php")
        assert source.seen == [("/w/api.php", "Bearer s3cr3t")]
        assert other.seen == []
    finally:
        client.close()
        source.close()
        other.close()


# -- locations: grants and reserved state compared as real paths ---------------------------


def test_a_symlink_in_a_tenants_grant_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    """The red team's HIGH: a link inside t1's granted folder pointing at t2's
    folder or at ragsync's own store passes a string comparison."""
    from connectors.location import allowed_for_tenant

    docs, home = tmp_path / "docs", tmp_path / "home"
    for folder in (docs / "t1", docs / "t2", home / "objects"):
        folder.mkdir(parents=True)
    (docs / "t2" / "secret.txt").write_text(SECRET)
    (docs / "t1" / "to-t2").symlink_to(docs / "t2")
    (docs / "t1" / "to-store").symlink_to(home / "objects")
    (docs / "t1" / "own").mkdir()
    grants = (f"{docs}/{{tenant}}",)
    assert not allowed_for_tenant(Location.parse(str(docs / "t1" / "to-t2")), grants, "t1")
    assert allowed_for_tenant(Location.parse(str(docs / "t2")), grants, "t2")
    assert allowed_for_tenant(Location.parse(str(docs / "t1" / "own")), grants, "t1")
    with pytest.raises(ConfigurationError, match="is refused as a source location"):
        source_location(str(docs / "t1" / "to-store"), reserved=(str(home),))
    # A linked grant is judged by its target too (the operator's own link).
    (tmp_path / "linked-docs").symlink_to(docs)
    assert allowed_for_tenant(
        Location.parse(str(docs / "t1" / "own")), (f"{tmp_path}/linked-docs/{{tenant}}",), "t1"
    )


def test_control_characters_are_read_in_file_names_and_refused_with_a_true_reason_in_urls(
    tmp_path: Path,
) -> None:
    """The red team's LOW: such names were refused as "outside the source's location"."""
    from ragsync.errors import InvalidEventError

    (tmp_path / "a\tb\nc\x7f.md").write_text("minutes")
    reader = _reader(tmp_path)
    assert reader.read("a\tb\nc\x7f.md") == reader.read(str(tmp_path / "a\tb\nc\x7f.md")) == b"minutes"
    with pytest.raises(OutsideLocationError):
        reader.read("../a\tb\nc\x7f.md")  # outside is still outside
    wiki = Location.parse("https://wiki.example.com/w")
    with pytest.raises(InvalidEventError) as caught:
        wiki.resolve("https://wiki.example.com/w/index.php?title=A\r\nX-Evil: 1")
    assert type(caught.value) is InvalidEventError
    assert str(caught.value).endswith("has control characters: not a valid address")
