"""Index versions on every keyword backend that runs here (tantivy and
Milvus' BM25), through the one store factory (``ragsync.index.backends``):
create a version beside the live one, write it while it is built (the
pipeline's shadow writes), flip, roll back, drop. Before the factory, a
version with ``keyword_index=milvus`` was refused and the pipeline wrote no
shadow copy outside tantivy.

Real Milvus Lite, tantivy, SQLite and the packaged model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError
from ragsync.index import versions as iv
from ragsync.index.backends import open_keyword_index, open_vector_index

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"


def _catalog_ids(settings: Settings) -> set[str]:
    catalog = open_catalog(settings)
    try:
        return catalog.chunks.chunk_ids_for_tenant("default")
    finally:
        catalog.close()


@pytest.mark.parametrize(
    ("backend", "v1_name", "v2_name"),
    [
        ("tantivy", "keyword", "keyword_v2"),
        ("milvus", "ragsync_chunks_keyword_v1", "ragsync_chunks_keyword_v2"),
    ],
)
def test_a_version_is_built_flipped_rolled_back_and_dropped(
    tmp_path: Path, backend: str, v1_name: str, v2_name: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "hotels.md").write_text("# Hotels\n\nA hotel costs up to 180 EUR per night in London.\n")
    (src / "bikes.txt").write_text("Bicycles are stored in the locked shed behind building C.\n")
    settings = Settings(home=str(tmp_path / "home"), keyword_index=backend)
    assert run_backfill(str(src), settings, show_progress=False).documents_indexed == 2
    v1_ids = _catalog_ids(settings)
    assert len(v1_ids) == 2

    live = iv.live_version(settings)
    assert (live.version, live.keyword_index) == (1, v1_name)
    v2 = iv.create_version(settings, MODEL, "v2-test", 384)
    assert (v2.version, v2.keyword_index, v2.state) == (2, v2_name, "building")

    # While v2 is built, the pipeline writes every change to it too.
    (src / "vpn.txt").write_text("Connect to the VPN before opening the intranet from home.\n")
    assert run_backfill(str(src), settings, show_progress=False).documents_indexed == 1
    new_ids = _catalog_ids(settings) - v1_ids
    assert len(new_ids) == 1
    with iv.open_version_keyword(settings, v2) as kw, iv.open_version_vector(settings, v2) as vec:
        assert kw.chunk_ids() == vec.chunk_ids() == new_ids

    iv.flip(settings, 2)
    with open_keyword_index(settings) as keywords, open_vector_index(settings, 384) as vectors:
        assert keywords.chunk_ids() == vectors.chunk_ids() == new_ids
    assert iv.rollback(settings).version == 1
    with open_keyword_index(settings) as keywords:
        assert keywords.chunk_ids() == v1_ids | new_ids
    assert iv.gc(settings, now=10**12) == [2]
    with pytest.raises(ConfigurationError):
        iv.open_version_keyword(settings, v2)
    with open_keyword_index(settings) as keywords:
        assert keywords.chunk_ids() == v1_ids | new_ids
