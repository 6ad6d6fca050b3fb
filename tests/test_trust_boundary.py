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
    started = time.monotonic()
    message = _refusal(reader, uri)
    assert time.monotonic() - started < 10  # the FIFO did not block the open
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
    with pytest.raises(ConfigurationError, match="overlaps ragsync's own state"):
        source_location(str(home / "objects" / "parsed"), reserved=(str(home),))
    with pytest.raises(ConfigurationError, match="overlaps"):
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
