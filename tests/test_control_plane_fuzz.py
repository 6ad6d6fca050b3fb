"""Property-based fuzzing of the control plane from its own OpenAPI document:
whatever schemathesis sends (valid and invalid bodies, paths, queries), the API
never answers 5xx. SQLite; 25 examples per operation. The app serves queries over a small
home (Milvus Lite, tantivy, the packaged model) so ``POST /v1/query`` is
fuzzed on real stores too."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="control plane needs fastapi (pip install fastapi uvicorn httpx)")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from control_plane.app import create_app  # noqa: E402
from tests.query_home import Doc, QueryHome  # noqa: E402

# The schema must exist when pytest collects the module (schemathesis's lazy
# ``from_fixture`` does not work with this pytest), so the app is built here on a
# temporary SQLite file that the module fixture below removes.
_DIR = Path(tempfile.mkdtemp(prefix="ragsync-fuzz-"))
_HOME = QueryHome(_DIR / "home")
_APP = create_app(
    _HOME.settings.catalog_url, max_body_bytes=64 * 1024, settings=_HOME.settings, allow_caller_groups=True
)
_, _KEY = _APP.state.keys.create_tenant("fuzz")
_HOME.write(
    [
        Doc("fuzz", "wiki-eng", "a.txt", "Deploy the service with the blue green runbook.", ("eng",)),
        Doc("fuzz", "wiki-eng", "b.txt", "Holiday calendar, office hours.", ("all",), mime="text/html"),
    ]
)
_APP.state.catalog.sources.create_source(
    "fuzz",
    source_id="wiki-eng",
    type="wiki",
    credentials_ref="secretmanager://s",
    sync="webhook",
    poll_interval_s=None,
)
schema = schemathesis.openapi.from_asgi("/openapi.json", _APP)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    _APP.state.catalog.close()
    shutil.rmtree(_DIR, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_causes_a_server_error(case: Any) -> None:
    headers = {"Authorization": f"Bearer {_KEY}"}
    response = case.call_and_validate(headers=headers, checks=[not_a_server_error])
    assert response.status_code < 500
