"""Listing an ``s3://`` prefix inside the pipeline through Beam's S3 file
system, against a local S3 server (moto's server mode, in process): shards
cover every key once, and a missing bucket fails the sync instead of
indexing nothing (Beam answers a missing bucket like an empty prefix).

boto3 (``apache-beam[aws]``) is in requirements.txt and moto in
requirements-dev.txt, so CI has them:
with ``$CI`` set a missing package fails the run; elsewhere the tests are
skipped with the reason."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
    import boto3
    import moto.server as moto_server
else:
    moto_server = pytest.importorskip(
        "moto.server", reason="moto is not installed (pip install 'moto[server]')"
    )
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (apache-beam[aws])")

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from beam_pipelines.backfill import register_source, source_id_for  # noqa: E402
from beam_pipelines.sync import SyncError, run_sync  # noqa: E402
from connectors.base import SourceSpec  # noqa: E402
from ragsync.config import Settings, open_catalog  # noqa: E402
from tests.mediawiki import free_port  # noqa: E402
from tests.proc import run_json  # noqa: E402
from transforms.common import counter_value  # noqa: E402
from transforms.listing import ListSource, listing_shards  # noqa: E402

KEYS = ["kb/a.txt", "kb/sub/b.md", "kb/_notes.txt", "kb/9.txt", "kb/.hidden", "other/x.txt"]


@pytest.fixture(scope="module")
def s3() -> Iterator[list[str]]:
    """A local S3 server with bucket ``docs``; yields the Beam options that reach it."""
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket="docs")
    for key in KEYS:
        client.put_object(Bucket="docs", Key=key, Body=f"text of {key}".encode())
    args = [
        f"--s3_endpoint_url={endpoint}",
        "--s3_access_key_id=k",
        "--s3_secret_access_key=s",
        "--s3_region_name=us-east-1",
    ]
    from apache_beam.io.filesystems import FileSystems

    FileSystems.set_options(PipelineOptions(args))
    try:
        yield args
    finally:
        server.stop()


ROOT = Path(__file__).resolve().parents[1]


def test_workers_list_every_key_under_the_prefix_once(s3: list[str], tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    spec = SourceSpec("s3-kb", "acme", "object_store", "s3://docs/kb", options={"acl_groups": ["staff"]})
    shards = listing_shards(spec, settings)
    assert len(shards) == 63
    p = beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(s3))
    listed = p | ListSource(spec, settings, shards)
    found: Any = listed | beam.Map(lambda f: f.source_object_id) | beam.combiners.ToList()
    ids_path = tmp_path / "ids.txt"
    found | beam.Map(lambda ids: ids_path.write_text("\n".join(sorted(ids))))
    result = p.run()
    result.wait_until_finish()
    # Hidden keys are skipped; keys outside the prefix are never listed.
    assert ids_path.read_text().splitlines() == ["9.txt", "_notes.txt", "a.txt", "sub/b.md"]
    assert counter_value(result, "documents_listed") == 4


def test_a_missing_bucket_fails_the_sync_and_pauses_the_source(s3: list[str], tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    register_source(settings, "s3-gone", "acme", "object_store", "s3://no-such-bucket/kb")
    with pytest.raises(SyncError, match="no object under s3://no-such-bucket/kb"):
        run_sync("s3-gone", settings, full=True, beam_args=s3, show_progress=False)
    catalog = open_catalog(settings)
    state = catalog.source_state("s3-gone")
    catalog.close()
    assert state is not None and state.paused and "missing bucket" in state.pause_reason


def test_backfill_of_an_s3_prefix_as_the_readme_runs_it(s3: list[str], tmp_path: Path) -> None:
    """``ragsync backfill s3://docs/kb --tenant acme -- --runner=DirectRunner --s3_endpoint_url=...``
    in its own process: every object under the prefix is indexed, nothing else."""
    home = tmp_path / "home"
    argv = [sys.executable, "-m", "beam_pipelines.cli", "backfill", "s3://docs/kb", "--tenant", "acme"]
    argv += ["--acl-groups", "staff", "--home", str(home), "--json", "--quiet", "--", "--runner=DirectRunner"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    summary = run_json([*argv, *s3], env, tmp_path)
    assert (summary["documents_listed"], summary["documents_indexed"], summary["dead_lettered"]) == (4, 4, 0)
    catalog = open_catalog(Settings(home=str(home)))
    try:
        assert catalog.document_counts_by_status("acme") == {"indexed": 4}
        uris = sorted(d.uri for d in catalog.documents_for_source(source_id_for("s3://docs/kb")))
    finally:
        catalog.close()
    assert uris == [
        "s3://docs/kb/9.txt",
        "s3://docs/kb/_notes.txt",
        "s3://docs/kb/a.txt",
        "s3://docs/kb/sub/b.md",
    ]
