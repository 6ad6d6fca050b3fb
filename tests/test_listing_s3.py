"""Listing an ``s3://`` or ``gs://`` prefix inside the pipeline through
Beam's S3 and GCS file systems, against local servers (moto's S3 app and
fake-gcs-server, see ``tests/object_store.py``): shards cover every key once,
a backfill indexes every object under the prefix and nothing else, and a
missing bucket fails the sync instead of indexing nothing (Beam's S3 file
system answers a missing bucket like an empty prefix; its GCS one raises)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipelines.quick import source_id_for
from beam_pipelines.sync import run_sync
from connectors.sources import register_source
from ragsync.config import Settings, open_catalog
from ragsync.errors import SyncError
from ragsync.source_types import SourceSpec
from tests.object_store import ObjectStore, object_store
from tests.proc import run_json
from transforms.listing import ListSource, listing_shards
from transforms.metrics import counter_value

KEYS = ["kb/a.txt", "kb/sub/b.md", "kb/_notes.txt", "kb/9.txt", "kb/.hidden", "other/x.txt"]


@pytest.fixture(scope="module", params=["s3", "gs"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """A local S3 or GCS server whose bucket ``docs`` holds ``KEYS``."""
    with object_store(request.param, tmp_path_factory.mktemp(request.param)) as found:
        for key in KEYS:
            found.put(key, f"text of {key}")
        from apache_beam.io.filesystems import FileSystems

        FileSystems.set_options(PipelineOptions(found.args))
        yield found


ROOT = Path(__file__).resolve().parents[1]


def test_workers_list_every_key_under_the_prefix_once(store: ObjectStore, tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    spec = SourceSpec("kb", "acme", "object_store", store.uri("kb"), options={"acl_groups": ["staff"]})
    shards = listing_shards(spec, settings)
    assert len(shards) == 63
    store.clear()
    p = beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(store.args))
    listed = p | ListSource(spec, settings, shards)
    found: Any = listed | beam.Map(lambda f: f.source_object_id) | beam.combiners.ToList()
    ids_path = tmp_path / "ids.txt"
    found | beam.Map(lambda ids: ids_path.write_text("\n".join(sorted(ids))))
    result = p.run()
    result.wait_until_finish()
    # Hidden keys are skipped; keys outside the prefix are never listed.
    assert ids_path.read_text().splitlines() == ["9.txt", "_notes.txt", "a.txt", "sub/b.md"]
    assert counter_value(result, "documents_listed") == 4
    assert store.object_reads() == []


def test_a_missing_bucket_fails_the_sync_and_pauses_the_source(store: ObjectStore, tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    uri = f"{store.scheme}://no-such-bucket/kb"
    register_source(settings, "gone", "acme", "object_store", uri)
    with pytest.raises(SyncError, match=f"{uri}"):
        run_sync("gone", settings, full=True, beam_args=store.args, show_progress=False)
    catalog = open_catalog(settings)
    state = catalog.sources.get_source("gone")
    catalog.close()
    assert state is not None and state.paused


def test_backfill_of_a_prefix_as_the_readme_runs_it(store: ObjectStore, tmp_path: Path) -> None:
    """``ragsync backfill s3://docs/kb --tenant acme -- --runner=DirectRunner --s3_endpoint_url=...``
    (or ``gs://docs/kb`` with ``STORAGE_EMULATOR_HOST`` set) in its own
    process: every object under the prefix is indexed and read once, nothing else."""
    home = tmp_path / "home"
    prefix = store.uri("kb")
    argv = [sys.executable, "-m", "cli.main", "backfill", prefix, "--tenant", "acme"]
    argv += ["--acl-groups", "staff", "--home", str(home), "--json", "--quiet", "--", "--runner=DirectRunner"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", **store.env)
    store.clear()
    summary = run_json([*argv, *store.args], env, tmp_path)
    assert (summary["documents_listed"], summary["documents_indexed"], summary["dead_lettered"]) == (4, 4, 0)
    expected = ["kb/9.txt", "kb/_notes.txt", "kb/a.txt", "kb/sub/b.md"]
    # Only objects under the prefix are read (Beam's GCS reader may fetch one twice).
    assert sorted(set(store.object_reads())) == [f"/docs/{key}" for key in expected]
    catalog = open_catalog(Settings(home=str(home)))
    try:
        assert catalog.documents.document_counts_by_status("acme") == {"indexed": 4}
        uris = sorted(d.uri for d in catalog.documents.documents_for_source(source_id_for(prefix)))
    finally:
        catalog.close()
    assert uris == [store.uri(key) for key in expected]
