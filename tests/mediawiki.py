"""A real MediaWiki for the tests, from Debian's packages.

``scripts/setup.sh`` installs ``mediawiki php-cli php-sqlite3 php-intl
php-mbstring php-xml`` when ``RAGSYNC_WITH_MEDIAWIKI=1`` (``scripts/test.sh``
sets it). The session installs one wiki into a temp directory with
``scripts/mediawiki.sh install`` (``install.php --dbtype=sqlite``) and warms it; each test gets a
copy of its SQLite files and its own ``php -S`` server on a free port
(``MW_CONFIG_FILE`` points MediaWiki at the copy's ``LocalSettings.php``), so
tests never see each other's pages. Pages change through MediaWiki's own
maintenance scripts (``edit.php``, ``deleteBatch.php``, ``moveBatch.php``),
the way an editor's change reaches the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

MEDIAWIKI_DIR = Path("/usr/share/mediawiki")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mediawiki.sh"
ADMIN_PASSWORD = "ragsync-test-Admin-9f3c"
MISSING = (
    "MediaWiki is not installed: run RAGSYNC_WITH_MEDIAWIKI=1 scripts/setup.sh "
    "(apt-get install mediawiki php-cli php-sqlite3 php-intl php-mbstring php-xml)"
)


def available() -> bool:
    """Whether php and Debian's MediaWiki are installed."""
    return shutil.which("php") is not None and (MEDIAWIKI_DIR / "maintenance" / "install.php").exists()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], *, env: dict[str, str], stdin: str | None = None) -> str:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=180, cwd=MEDIAWIKI_DIR, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


class MediaWiki:
    """One wiki: its files under ``root`` and, while started, a server.

    Attributes:
        root: directory holding ``db/`` (SQLite) and ``conf/LocalSettings.php``.
        port: the server's port.
    """

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self._server: subprocess.Popen[bytes] | None = None

    @property
    def conf(self) -> Path:
        return self.root / "conf" / "LocalSettings.php"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api.php"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "MW_CONFIG_FILE": str(self.conf), "PHP_CLI_SERVER_WORKERS": "4"}

    # -- install and copy -----------------------------------------------------------

    @classmethod
    def install(cls, root: Path) -> MediaWiki:
        """Install a fresh wiki under ``root`` (about 3 s) and warm its caches."""
        port = free_port()
        # The install is scripts/mediawiki.sh's, the one the README's wiki walkthrough runs.
        proc = subprocess.run(
            [str(SCRIPT), "install", str(root)],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "RAGSYNC_WIKI_PORT": str(port)},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/mediawiki.sh install failed ({proc.returncode}):\n{proc.stderr}")
        wiki = cls(root, port)
        wiki.start()
        wiki.stop()
        return wiki

    def copy_to(self, root: Path) -> MediaWiki:
        """A copy of this wiki's files under ``root``, served on a new port."""
        shutil.copytree(self.root / "db", root / "db")
        (root / "conf").mkdir(parents=True)
        port = free_port()
        text = self.conf.read_text(encoding="utf-8")
        text = text.replace(str(self.root / "db"), str(root / "db"))
        text = text.replace(f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{port}")
        (root / "conf" / "LocalSettings.php").write_text(text, encoding="utf-8")
        return MediaWiki(root, port)

    # -- server -------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Serve the wiki with ``php -S`` and wait until ``api.php`` answers."""
        if self._server is not None:
            return
        log = (self.root / "server.log").open("ab")
        self._server = subprocess.Popen(
            ["php", "-S", f"127.0.0.1:{self.port}", "-t", str(MEDIAWIKI_DIR)],
            cwd=MEDIAWIKI_DIR,
            env=self._env(),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    f"{self.api_url}?action=query&meta=siteinfo&format=json", timeout=30
                ):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"MediaWiki did not answer on port {self.port} within {timeout_s:g} s")

    def stop(self) -> None:
        """Stop the server (its whole process group: php -S forks workers)."""
        if self._server is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._server.pid, signal.SIGTERM)
        try:
            self._server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._server.pid, signal.SIGKILL)
            self._server.wait(timeout=10)
        self._server = None

    # -- editing ------------------------------------------------------------------------

    def _maintenance(self, script: str, *args: str, stdin: str | None = None) -> str:
        return _run(
            ["php", f"maintenance/{script}", "--conf", str(self.conf), *args], env=self._env(), stdin=stdin
        )

    def edit(self, title: str, text: str, summary: str = "test edit") -> None:
        """Create or replace a page's wikitext as user Admin."""
        self._maintenance("edit.php", "-u", "Admin", "-s", summary, title, stdin=text)

    def add_user(self, name: str, *groups: str) -> None:
        """Create a user (``createAndPromote.php``) in ``groups``; a group the
        wiki does not know yet is declared in its settings first (a group
        with the ``read`` right)."""
        settings = self.conf.read_text(encoding="utf-8")
        with self.conf.open("a", encoding="utf-8") as fh:
            for group in groups:
                line = f"$wgGroupPermissions[{json.dumps(group)}]['read'] = true;"
                if line not in settings:
                    fh.write(f"\n{line}\n")
        custom = ["--custom-groups", ",".join(groups)] if groups else []
        self._maintenance("createAndPromote.php", *custom, name, "ragsync-test-pass-7d1e")

    def remove_from_group(self, name: str, group: str) -> None:
        """Take ``name`` out of ``group`` (MediaWiki's UserGroupManager, through ``eval.php``)."""
        code = (
            "$u = MediaWiki\\MediaWikiServices::getInstance()->getUserFactory()->newFromName("
            f"{json.dumps(name)});\n"
            "MediaWiki\\MediaWikiServices::getInstance()->getUserGroupManager()"
            f"->removeUserFromGroup($u, {json.dumps(group)});\n"
        )
        self._maintenance("eval.php", stdin=code)

    def delete(self, title: str) -> None:
        listing = self.root / "delete.txt"
        listing.write_text(title + "\n", encoding="utf-8")
        self._maintenance("deleteBatch.php", "-u", "Admin", str(listing))

    def move(self, old: str, new: str) -> None:
        """Rename a page (MediaWiki leaves a redirect at the old title)."""
        listing = self.root / "move.txt"
        listing.write_text(f"{old}|{new}\n", encoding="utf-8")
        self._maintenance("moveBatch.php", "-u", "Admin", str(listing))
