"""Shared pytest fixtures.

PostgreSQL: ``postgres_url`` (session scope) is, in order of preference,

1. ``$RAGSYNC_PG_URL`` when set (a SQLAlchemy URL whose user may
   ``CREATE DATABASE``), or
2. a throwaway cluster started from the server binaries in
   ``$RAGSYNC_PG_BINDIR``, else ``/usr/lib/postgresql/*/bin`` or ``PATH``: ``initdb`` into a temp
   directory (as the ``postgres`` OS user when running as root), trust auth,
   ``fsync=off``, a free port on 127.0.0.1 and a private socket directory;
   stopped and deleted at the end of the session.

Without binaries the PostgreSQL tests are skipped with the reason, except
when ``$CI`` is set: CI must prove both backends, so there they fail.

``catalog_url`` gives each test a fresh, empty database on each backend
(``sqlite``: a file under ``tmp_path``; ``postgres``: a new database
``ragsync_t_<hex>``, dropped after the test).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

# A home without an index is built with onnx-int8 unless a backend is set
# (``ragsync.index.versions.resolve_backend``). The suite's exact scores,
# rankings and cache keys were written for torch, so every test (and every
# CLI subprocess it starts) runs on torch unless it sets a backend itself;
# tests/test_backend_default.py unsets this to test the default.
os.environ.setdefault("RAGSYNC_EMBED_BACKEND", "torch")

_PG_MISSING = "PostgreSQL server binaries not found: apt-get install postgresql, or set RAGSYNC_PG_URL"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _pg_bindir() -> Path | None:
    """Directory holding initdb and pg_ctl ($RAGSYNC_PG_BINDIR, else newest installed)."""
    override = os.environ.get("RAGSYNC_PG_BINDIR")
    if override:
        ok = (Path(override) / "initdb").exists() and (Path(override) / "pg_ctl").exists()
        return Path(override) if ok else None
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    for directory in candidates:
        if (Path(directory) / "initdb").exists() and (Path(directory) / "pg_ctl").exists():
            return Path(directory)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run as the ``postgres`` user then."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *argv]
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_shell_quote(a) for a in argv)]


def _shell_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def _admin_conninfo(sqlalchemy_url: str, database: str) -> str:
    """A libpq URI for psycopg from a SQLAlchemy URL, pointing at ``database``."""
    url = make_url(sqlalchemy_url).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


def _fail_or_skip(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI is set: both backends must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a PostgreSQL database ``ragsync`` for the session."""
    env_url = os.environ.get("RAGSYNC_PG_URL")
    if env_url:
        yield env_url
        return

    bindir = _pg_bindir()
    if bindir is None:
        _fail_or_skip(_PG_MISSING)
        return
    if os.geteuid() == 0:
        try:
            import pwd

            pw = pwd.getpwnam("postgres")
        except KeyError:
            _fail_or_skip("running as root and there is no 'postgres' OS user to run the server")
            return
        uid, gid = pw.pw_uid, pw.pw_gid
    else:
        uid, gid = os.geteuid(), os.getegid()

    root = Path(tempfile.mkdtemp(prefix="ragsync-pg-"))
    os.chown(root, uid, gid)
    data, sock, log = root / "data", root / "sock", root / "server.log"
    sock.mkdir()
    os.chown(sock, uid, gid)
    port = _free_port()

    def run(argv: list[str]) -> None:
        proc = subprocess.run(_as_server_user(argv), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            server_log = log.read_text() if log.exists() else ""
            raise RuntimeError(
                f"{argv[0]} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{server_log}"
            )

    started = False
    try:
        run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        # PostgreSQL's default max_connections (100), as scripts/pg_throwaway.sh: a process shares
        # one bounded catalog pool (ragsync.catalog.base), test_cluster asserts the bound.
        options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        started = True
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE ragsync")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/ragsync"
    finally:
        if started:
            subprocess.run(
                _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty catalog database URL per test, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return

    import psycopg
    from psycopg import sql

    base = request.getfixturevalue("postgres_url")
    name = f"ragsync_t_{uuid.uuid4().hex[:16]}"
    admin = _admin_conninfo(base, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Any]:
    """A ``Catalog`` open on :func:`catalog_url` (each backend), closed after the test."""
    from ragsync.catalog import Catalog

    cat = Catalog.open(catalog_url)
    try:
        yield cat
    finally:
        cat.close()


# -- MediaWiki ------------------------------------------------------------------


def _require(available: bool, missing: str, service: str) -> None:
    """Skip when a service's packages are missing, except with ``$CI`` set:
    CI installs them through ``scripts/setup.sh`` and must run its tests."""
    if not available:
        if _in_ci():
            pytest.fail(f"{missing} (CI is set: the {service} tests must run)", pytrace=False)
        pytest.skip(missing)


@pytest.fixture(scope="session")
def mediawiki_template() -> Iterator[object]:
    """One installed MediaWiki (SQLite) per session; tests serve copies of it.

    Skipped when MediaWiki is not installed, except with ``$CI`` set: CI
    installs it through ``scripts/setup.sh`` and must run these tests.
    """
    from tests import mediawiki

    _require(mediawiki.available(), mediawiki.MISSING, "MediaWiki")
    root = Path(tempfile.mkdtemp(prefix="ragsync-mw-"))
    try:
        yield mediawiki.MediaWiki.install(root / "template")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def mediawiki(mediawiki_template: object, tmp_path: Path) -> Iterator[object]:
    """A running wiki of this test's own (a copy of the session's install)."""
    from tests.mediawiki import MediaWiki

    assert isinstance(mediawiki_template, MediaWiki)
    wiki = mediawiki_template.copy_to(tmp_path / "wiki")
    wiki.start()
    try:
        yield wiki
    finally:
        wiki.stop()


# -- Redmine --------------------------------------------------------------------


@pytest.fixture(scope="session")
def redmine_template() -> object:
    """The installed Redmine (SQLite) test modules serve copies of: made once
    per machine by ``scripts/redmine.sh install`` and kept (``tests.redmine.template``),
    since each test file runs in a process of its own.

    Skipped when Redmine is not installed, except with ``$CI`` set: CI
    installs it through ``scripts/setup.sh`` and must run these tests.
    """
    from tests import redmine

    _require(redmine.available(), redmine.MISSING, "Redmine")
    return redmine.template()


@pytest.fixture(scope="module")
def redmine(redmine_template: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running Redmine of this test module's own (a copy of the session's
    install; Rails takes seconds to start, so tests of a module share it and
    each makes its own projects, users and issues)."""
    from tests.redmine import Redmine

    assert isinstance(redmine_template, Redmine)
    server = redmine_template.copy_to(tmp_path_factory.mktemp("redmine"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- Pub/Sub emulator -------------------------------------------------------------


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[object]:
    """Google's Pub/Sub emulator on a free port for the session
    (``tests/pubsub_emulator.py``), its Java process owned and stopped here.

    Skipped when gcloud's pubsub-emulator component or Java is missing,
    except with ``$CI`` set: CI's machine has both and must run these tests.
    """
    from tests import pubsub_emulator as emulator

    _require(emulator.available(), emulator.MISSING, "Pub/Sub")
    root = Path(tempfile.mkdtemp(prefix="ragsync-pubsub-"))
    running = emulator.PubSubEmulator.start(root)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(root, ignore_errors=True)
