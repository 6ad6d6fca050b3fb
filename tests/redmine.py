"""A real Redmine for the tests, from Debian's packages (``redmine redmine-sqlite``).

``scripts/setup.sh`` installs them when ``RAGSYNC_WITH_REDMINE=1``
(``scripts/test.sh`` sets it). One Redmine is installed per machine with
``scripts/redmine.sh install`` (migrations, default data, the REST API on, the
admin's key: about 20 s of CPU) into a template directory kept under the temp
directory, keyed by the Redmine package and the script (:func:`template`);
each test module serves a copy of it (its SQLite file) with
``scripts/redmine.sh start`` on a free port, and each test makes its own
projects, users and issues through the REST API, the way a person's change
reaches Redmine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.mediawiki import free_port

REDMINE_DIR = Path("/usr/share/redmine")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "redmine.sh"
MISSING = (
    "Redmine is not installed: run RAGSYNC_WITH_REDMINE=1 scripts/setup.sh "
    "(apt-get install redmine redmine-sqlite)"
)
#: Roles of Redmine's default data: Manager (issues visibility "all"),
#: Developer and Reporter ("default"); each has view_issues.
MANAGER, DEVELOPER, REPORTER = 3, 4, 5


def available() -> bool:
    """Whether Ruby and Debian's Redmine are installed."""
    return shutil.which("ruby") is not None and (REDMINE_DIR / "config" / "environment.rb").exists()


def template() -> Redmine:
    """The machine's template instance, installed on first use.

    Kept under the temp directory, named by a hash of the Redmine package's
    version file and of ``scripts/redmine.sh`` (either changing makes a new
    one); test files running in parallel processes wait on a lock for the one
    that installs it. The admin's key is written last: a directory without it
    is an install that was cut short, made again.
    """
    import fcntl
    import hashlib
    import tempfile

    digest = hashlib.sha256()
    for path in (REDMINE_DIR / "lib" / "redmine" / "version.rb", SCRIPT):
        digest.update(path.read_bytes())
    base = Path(tempfile.gettempdir())
    root = base / f"ragsync-redmine-template-{os.getuid()}-{digest.hexdigest()[:16]}"
    with open(base / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "admin.key").exists():
            shutil.rmtree(root, ignore_errors=True)
            try:
                _script("install", str(root))  # the instance's paths name its directory: installed in place
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
    return Redmine(root, 0)


def _script(*args: str, port: int | None = None) -> str:
    env = {**os.environ, **({"RAGSYNC_REDMINE_PORT": str(port)} if port else {})}
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/redmine.sh {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout.strip()


class Redmine:
    """One Redmine instance: its files under ``root`` and, while started, a server.

    Attributes:
        root: the instance directory of ``scripts/redmine.sh``.
        port: the server's port.
    """

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        """The admin's API key."""
        return (self.root / "admin.key").read_text(encoding="utf-8").strip()

    @classmethod
    def install(cls, root: Path) -> Redmine:
        """Install a fresh Redmine under ``root`` (scripts/redmine.sh, the README's)."""
        _script("install", str(root))
        return cls(root, 0)

    def copy_to(self, root: Path) -> Redmine:
        """A copy of this instance (database, configuration) under ``root``, on a new port."""
        inst = root / "instance"
        for sub in ("db", "files", "log", "tmp/cache", "tmp/pids"):
            (inst / sub).mkdir(parents=True)
        shutil.copytree(self.root / "instance" / "config", inst / "config")
        shutil.copy2(self.root / "instance" / "db" / "redmine.sqlite3", inst / "db" / "redmine.sqlite3")
        database = inst / "config" / "database.yml"
        database.write_text(
            database.read_text(encoding="utf-8").replace(str(self.root), str(root)), encoding="utf-8"
        )
        shutil.copy2(self.root / "admin.key", root / "admin.key")
        return Redmine(root, free_port())

    def start(self) -> None:
        """Serve it (``scripts/redmine.sh start``) and wait until the REST API answers."""
        _script("start", str(self.root), port=self.port)

    def stop(self) -> None:
        _script("stop", str(self.root))

    # -- the REST API, as the admin or as a user ------------------------------------

    def call(self, method: str, path: str, body: Any = None, *, key: str | None = None) -> Any:
        """One REST call; the decoded JSON answer (None for an empty one).

        Raises:
            RuntimeError: an error status, with Redmine's message.
        """
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            f"{self.url}/{path}",
            data=data,
            method=method,
            headers={"X-Redmine-API-Key": key or self.key, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code} {exc.read()[:500]!r}") from None
        return json.loads(text) if text.strip() else None

    def project(self, identifier: str, *, public: bool = False) -> int:
        body = {"project": {"name": identifier.title(), "identifier": identifier, "is_public": public}}
        return int(self.call("POST", "projects.json", body)["project"]["id"])

    def user(self, login: str, *, admin: bool = False) -> int:
        body = {
            "user": {
                "login": login,
                "firstname": login.title(),
                "lastname": "Tester",
                "mail": f"{login}@example.net",
                "password": "ragsync-test-pass-7d1e",
                "admin": admin,
            }
        }
        return int(self.call("POST", "users.json", body)["user"]["id"])

    def api_key(self, user: int) -> str:
        """A user's own API key (the admin may read it)."""
        return str(self.call("GET", f"users/{user}.json")["user"]["api_key"])

    def lock(self, user: int) -> None:
        self.call("PUT", f"users/{user}.json", {"user": {"status": 3}})

    def group(self, name: str, user_ids: list[int]) -> int:
        return int(
            self.call("POST", "groups.json", {"group": {"name": name, "user_ids": user_ids}})["group"]["id"]
        )

    def member(self, project: int, principal: int, *roles: int) -> int:
        """Make a user or group a member of ``project``; the membership's id."""
        body = {"membership": {"user_id": principal, "role_ids": list(roles)}}
        return int(self.call("POST", f"projects/{project}/memberships.json", body)["membership"]["id"])

    def remove_member(self, membership: int) -> None:
        self.call("DELETE", f"memberships/{membership}.json")

    def issue(self, project: int, subject: str, description: str = "", **fields: Any) -> int:
        body = {"issue": {"project_id": project, "subject": subject, "description": description, **fields}}
        return int(self.call("POST", "issues.json", body)["issue"]["id"])

    def update(self, issue: int, **fields: Any) -> None:
        self.call("PUT", f"issues/{issue}.json", {"issue": fields})

    def attach(self, issue: int, filename: str, data: bytes, content_type: str = "text/plain") -> int:
        """Upload ``data`` and attach it to ``issue``; the attachment's id."""
        request = urllib.request.Request(
            f"{self.url}/uploads.json?filename={filename}",
            data=data,
            method="POST",
            headers={"X-Redmine-API-Key": self.key, "Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            token = json.loads(answer.read())["upload"]["token"]
        upload = {"token": token, "filename": filename, "content_type": content_type}
        self.update(issue, uploads=[upload])
        found = self.call("GET", f"issues/{issue}.json?include=attachments")["issue"]["attachments"]
        return int(next(a["id"] for a in found if a["filename"] == filename))

    def sql(self, statement: str, *params: Any) -> None:
        """Change Redmine's database directly, for what its REST API cannot
        change (roles, settings); Redmine reads both from the database per request."""
        import sqlite3

        db = sqlite3.connect(self.root / "instance" / "db" / "redmine.sqlite3", timeout=30)
        try:
            db.execute(statement, params)
            db.commit()
        finally:
            db.close()

    def setting(self, name: str, value: str) -> None:
        """Set one of Redmine's settings (a newer ``updated_on`` empties its settings cache)."""
        import time

        now = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + 1))
        self.sql("DELETE FROM settings WHERE name = ?", name)
        self.sql("INSERT INTO settings (name, value, updated_on) VALUES (?, ?, ?)", name, value, now)

    def custom_field(self, name: str, *, visible: bool, role: int | None = None) -> int:
        """An issue custom field (text) for every project and tracker; one not
        ``visible`` to all is seen by ``role`` only. Redmine 5.0's REST API
        cannot make one: written as its admin page would."""
        import sqlite3

        db = sqlite3.connect(self.root / "instance" / "db" / "redmine.sqlite3", timeout=30)
        try:
            field = db.execute(
                "INSERT INTO custom_fields (type, name, field_format, is_for_all, visible, format_store,"
                " position) VALUES ('IssueCustomField', ?, 'string', 1, ?, ?, 1)",
                (
                    name,
                    visible,
                    "--- !ruby/hash:ActiveSupport::HashWithIndifferentAccess\ntext_formatting: ''\n",
                ),
            ).lastrowid
            db.executemany(
                "INSERT INTO custom_fields_trackers (custom_field_id, tracker_id) VALUES (?, ?)",
                [(field, t) for t in (1, 2, 3)],
            )
            if role is not None:
                db.execute(
                    "INSERT INTO custom_fields_roles (custom_field_id, role_id) VALUES (?, ?)", (field, role)
                )
            db.commit()
        finally:
            db.close()
        return int(field or 0)

    def delete_issue(self, issue: int) -> None:
        self.call("DELETE", f"issues/{issue}.json")

    def delete_attachment(self, attachment: int) -> None:
        self.call("DELETE", f"attachments/{attachment}.json")


Fault = tuple[int, dict[str, str]]


class FaultProxy:
    """A local HTTP proxy in front of a Redmine that answers some requests
    itself: a 429 with ``Retry-After``, a 5xx, a 404 in the middle of a
    listing. ``plan(path_and_query)`` returns None to forward the request, or
    (status, headers) to answer with an empty JSON object instead.

    Attributes:
        url: the proxy's base URL (register the source there).
        seen: every path (with query) asked, in order.
    """

    def __init__(self, target: str, plan: Any) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        self.plan = plan
        self.seen: list[str] = []
        proxy = self
        upstream = urlsplit(target)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                proxy.seen.append(self.path)
                fault = proxy.plan(self.path)
                if fault is not None:
                    status, headers = fault
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request("GET", self.path, headers=headers)
                answer = conn.getresponse()
                body = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                conn.close()

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
