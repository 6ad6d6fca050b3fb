"""Embedding backends (torch, onnx, onnx-int8) from the same local model
files, a model's dimension read from its files, the device choice, and the
refusal to put vectors of another dimension into an existing index."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ragsync.config import Settings
from ragsync.embedding import onnx as embedding_onnx
from ragsync.embedding.models import (
    DEFAULT_MODEL,
    ModelSpec,
    choose_device,
    cuda_available,
    model_dimension,
    model_for,
    model_max_tokens,
    model_prompts,
    spec_for,
)
from ragsync.errors import ConfigurationError
from ragsync.index.milvus_vectors import MilvusVectorIndex
from transforms.embed import PlanEmbeddingHandler

SENTENCES = [
    "Employees may book a hotel room of up to 200 pounds a night in London.",
    "The quarterly report shows revenue up 12 percent.",
    "Reset your password from the account settings page.",
    "Tables in scanned PDFs need OCR before their cells can be read.",
    "Der Zug nach Berlin fährt um acht Uhr ab.",
    "a",
]
MIN_COSINE = {"onnx": 0.99, "onnx-int8": 0.98}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return model_for(spec_for(DEFAULT_MODEL)).encode_passages(SENTENCES)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnx", "onnx-int8"])
def test_each_backend_gives_normalised_vectors_close_to_torch(
    backend: str, cache_dir: str, torch_vectors: np.ndarray, tmp_path: Path
) -> None:
    settings = Settings(home=str(tmp_path / "home"), embed_backend=backend, model_cache_dir=cache_dir)
    spec = spec_for("", settings)
    assert spec.backend == backend and spec.dim == 384
    vectors = model_for(spec).encode_passages(SENTENCES)
    assert vectors.shape == (len(SENTENCES), spec.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(vectors * torch_vectors, axis=1)
    assert cosines.min() > MIN_COSINE.get(backend, 0.9999), cosines
    # Queries go through the same model (no prefixes for MiniLM).
    assert model_for(spec).encode_queries(["hotel in London"]).shape == (1, 384)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_the_export_is_made_once_and_reused(
    backend: str, cache_dir: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(home=str(tmp_path / "home"), embed_backend=backend, model_cache_dir=cache_dir)
    spec = spec_for("", settings)
    path = embedding_onnx.ensure_export(spec)  # made by the test above, or now
    assert path.startswith(os.path.join(cache_dir, "onnx"))
    mtime = os.stat(path).st_mtime_ns
    manifest = json.loads(Path(os.path.dirname(path), embedding_onnx.MANIFEST).read_text())
    assert manifest["cosine_fp32"] >= 0.99 and manifest["fused"] is True
    if backend == "onnx-int8":
        assert manifest["cosine_int8"] >= 0.98

    def no_export(*args: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(embedding_onnx, "_export_fp32", no_export)
    monkeypatch.setattr(embedding_onnx, "_quantize", no_export)
    fresh = embedding_onnx.OnnxModel(spec)  # a new instance, as a new worker process has
    assert fresh.encode_passages(SENTENCES[:2]).shape == (2, 384)
    assert os.stat(path).st_mtime_ns == mtime
    leftovers = [n for n in os.listdir(os.path.join(cache_dir, "onnx")) if n.startswith(".export-")]
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_a_vector_does_not_depend_on_the_texts_batched_with_it(
    backend: str, cache_dir: str, tmp_path: Path
) -> None:
    # int8 quantizes activations with one scale per onnxruntime run: texts
    # sharing a padded run moved each other's vectors (cosine down to 0.97).
    settings = Settings(home=str(tmp_path / "home"), embed_backend=backend, model_cache_dir=cache_dir)
    model = embedding_onnx.OnnxModel(spec_for("", settings))
    long_text = " ".join(SENTENCES * 12)  # past the 256-token limit: the widest possible run
    alone = np.stack([model.encode_passages([text])[0] for text in SENTENCES])
    mixed = model.encode_passages([long_text, *SENTENCES, long_text, "b"])[1 : 1 + len(SENTENCES)]
    reversed_ = model.encode_passages(list(reversed(SENTENCES)))[::-1]
    np.testing.assert_array_equal(mixed, alone)
    np.testing.assert_array_equal(reversed_, alone)


def test_backend_versions_are_distinct_cache_keys(tmp_path: Path) -> None:
    versions = {
        b: spec_for("", Settings(home=str(tmp_path), embed_backend=b)).version
        for b in ("torch", "onnx", "onnx-int8")
    }
    assert versions["torch"].startswith("all-MiniLM-L6-v2@")
    assert versions["onnx"] == versions["torch"] + "+onnx"
    assert versions["onnx-int8"] == versions["torch"] + "+onnx-int8"


def test_backend_setting_from_env_flag_and_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.main import build_parser, settings_from_args

    monkeypatch.setenv("RAGSYNC_EMBED_BACKEND", "onnx-int8")
    assert Settings(home=str(tmp_path)).embed_backend == "onnx-int8"
    assert Settings(home=str(tmp_path)).model_cache_dir == ""  # resolved where the model loads
    args = build_parser().parse_args(["status", "--home", str(tmp_path), "--embed-backend", "onnx"])
    assert settings_from_args(args).embed_backend == "onnx"  # the flag wins over the variable
    args = build_parser().parse_args(["status", "--home", str(tmp_path)])
    assert settings_from_args(args).embed_backend == "onnx-int8"
    monkeypatch.setenv("RAGSYNC_EMBED_BACKEND", "tensorrt")
    with pytest.raises(ConfigurationError, match="embed_backend must be one of torch, onnx, onnx-int8"):
        Settings(home=str(tmp_path))
    monkeypatch.delenv("RAGSYNC_EMBED_BACKEND")
    args = build_parser().parse_args(["status", "--home", str(tmp_path), "--embed-backend", "tensorrt"])
    with pytest.raises(ConfigurationError, match="embed_backend must be one of"):
        settings_from_args(args)


# ------------------------------------------------------------------ any model


def _write_model(root: Path, *, hidden: int, dense: int = 0, modes: tuple[str, ...] = ("mean",)) -> Path:
    """Config files of a sentence-transformers model directory (no weights:
    the dimension is read from these files alone)."""
    root.mkdir(parents=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (root / "config.json").write_text(
        json.dumps({"hidden_size": hidden, "max_position_embeddings": 514, "model_type": "xlm-roberta"})
    )
    (root / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": hidden}
    pooling.update(
        {f"pooling_mode_{m}_tokens" if m != "cls" else "pooling_mode_cls_token": True for m in modes}
    )
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if dense:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        (root / "2_Dense").mkdir()
        (root / "2_Dense" / "config.json").write_text(
            json.dumps({"in_features": hidden, "out_features": dense})
        )
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}})
    )
    return root


def test_the_dimension_token_limit_and_prompts_come_from_the_model_files(tmp_path: Path) -> None:
    big = _write_model(tmp_path / "e5-large-like", hidden=1024)
    assert model_dimension(str(big)) == 1024
    assert model_max_tokens(str(big)) == 512  # 514 RoBERTa positions less the 2 reserved
    assert model_prompts(str(big)) == ("query: ", "passage: ")
    assert model_dimension(str(_write_model(tmp_path / "dense", hidden=768, dense=256))) == 256
    assert model_dimension(str(_write_model(tmp_path / "two", hidden=384, modes=("cls", "mean")))) == 768
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"hidden_size": 1024}))
    assert model_dimension(str(plain)) == 1024
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigurationError, match="cannot read the embedding dimension"):
        model_dimension(str(empty))

    settings = Settings(home=str(tmp_path / "h"), embed_model=str(big), embed_query_prefix="")
    spec = spec_for("", settings)
    assert (spec.name, spec.path, spec.dim, spec.max_seq_length) == (str(big), str(big), 1024, 512)
    assert (spec.query_prefix, spec.passage_prefix) == ("", "passage: ")  # the setting overrides the model
    assert spec.version.startswith("e5-large-like@")
    assert spec_for("", Settings(home=str(tmp_path / "h"), embed_max_tokens=128)).max_seq_length == 128


def test_the_packaged_model_dimension_matches_the_loaded_model() -> None:
    spec = spec_for(DEFAULT_MODEL)
    from sentence_transformers import SentenceTransformer

    loaded = SentenceTransformer(spec.path, device="cpu")
    getter = getattr(loaded, "get_embedding_dimension", None) or loaded.get_sentence_embedding_dimension
    assert spec.dim == getter() == 384
    assert spec.max_seq_length == 512


def test_a_changed_dimension_on_an_existing_index_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "milvus.db")
    MilvusVectorIndex(uri, "chunks", 384, create=True).close()
    with pytest.raises(ConfigurationError) as err:
        MilvusVectorIndex(uri, "chunks", 1024, create=True)
    message = str(err.value)
    assert "dimension 384" in message and "gives 1024" in message
    assert "Re-embed into a new index version" in message and "ragsync reembed" in message
    index = MilvusVectorIndex(uri, "chunks", 384)  # the index itself is untouched
    assert index.dim == 384
    index.close()


# --------------------------------------------------------------------- device


@pytest.mark.parametrize(
    ("requested", "has_cuda", "expected"),
    [
        ("", True, "cuda"),
        ("", False, "cpu"),
        ("auto", True, "cuda"),
        ("cpu", True, "cpu"),
        ("cuda", True, "cuda"),
        ("cuda:1", True, "cuda:1"),
    ],
)
def test_choose_device(requested: str, has_cuda: bool, expected: str) -> None:
    assert choose_device(requested, has_cuda) == expected


def test_choose_device_refuses_a_missing_gpu_or_a_bad_name() -> None:
    with pytest.raises(ConfigurationError, match="no GPU"):
        choose_device("cuda", False)
    with pytest.raises(ConfigurationError, match="auto, cpu, cuda or cuda:N"):
        choose_device("tpu", True)


@pytest.mark.parametrize(
    ("has_cuda", "requested", "expected"), [(True, "", "cuda"), (False, "", "cpu"), (True, "cpu", "cpu")]
)
def test_the_inference_handler_places_the_model_with_choose_device(
    has_cuda: bool, requested: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transforms.embed as embed

    calls: list[tuple[str, bool]] = []

    def spy(req: str, cuda: bool) -> str:
        calls.append((req, cuda))
        return choose_device(req, cuda)

    backends: list[str] = []

    def cuda(backend: str = "torch") -> bool:
        backends.append(backend)
        return has_cuda

    monkeypatch.setattr(embed, "cuda_available", cuda)
    monkeypatch.setattr(embed, "choose_device", spy)
    spec = spec_for(DEFAULT_MODEL)
    handler = PlanEmbeddingHandler(ModelSpec(**{**spec.__dict__, "device": requested}))
    model = handler.load_model()  # lazy: nothing is loaded here
    assert model.spec.device == expected
    assert calls == [(requested, has_cuda)]
    assert backends == ["torch"]  # the spec's backend decides who is asked (onnxruntime for ONNX)


@pytest.mark.skipif(
    not cuda_available(), reason="no GPU on this machine (torch.cuda.is_available() is False)"
)
def test_embedding_on_a_real_gpu(torch_vectors: np.ndarray) -> None:  # pragma: no cover - needs a GPU
    spec = spec_for(DEFAULT_MODEL)
    handler = PlanEmbeddingHandler(spec)
    model = handler.load_model()
    assert model.spec.device == "cuda"
    vectors = model.encode(SENTENCES)
    assert np.sum(vectors * torch_vectors, axis=1).min() > 0.999


# ------------------------------------------- a real model of another dimension


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (random-weight, seeded) 48-dimension BERT sentence-transformers
    directory with MiniLM's tokenizer: not the packaged model, not 384."""
    import torch
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("tiny") / "tiny-bert-48"
    torch.manual_seed(7)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=128,
    )
    BertModel(cfg).save_pretrained(str(root))
    packaged = Path(spec_for(DEFAULT_MODEL).path)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (root / name).write_bytes((packaged / name).read_bytes())
    for name in ("modules.json", "sentence_bert_config.json"):
        (root / name).write_bytes((packaged / name).read_bytes())
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 48, "pooling_mode_mean_tokens": True})
    )
    return root


@pytest.mark.slow
def test_any_local_model_runs_with_its_own_dimension(tiny_model: Path, tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"), embed_model=str(tiny_model), embed_backend="onnx")
    spec = spec_for("", settings)
    assert (spec.dim, spec.max_seq_length) == (48, 128)
    torch_vectors = model_for(replace(spec, backend="torch")).encode_passages(SENTENCES)
    onnx_vectors = model_for(spec).encode_passages(SENTENCES)
    assert torch_vectors.shape == onnx_vectors.shape == (len(SENTENCES), 48)
    assert np.sum(torch_vectors * onnx_vectors, axis=1).min() > 0.99


def test_the_index_is_created_with_the_model_dimension_and_keeps_it(tiny_model: Path, tmp_path: Path) -> None:
    from ragsync.index.versions import live_spec, live_version, prepare_stores

    home = str(tmp_path / "home")
    tiny = Settings(home=home, embed_model=str(tiny_model))
    prepare_stores(tiny, live_spec(tiny))
    index = MilvusVectorIndex(tiny.milvus_uri, tiny.collection, 48)  # opens: created with 48
    index.close()
    assert (live_version(tiny).model_name, live_version(tiny).dim) == (str(tiny_model), 48)
    assert live_spec(Settings(home=home)).dim == 48  # unset model: the live one's
    with pytest.raises(ConfigurationError, match=r"ragsync reembed --model all-MiniLM-L6-v2"):
        live_spec(Settings(home=home, embed_model=DEFAULT_MODEL))
    with pytest.raises(ConfigurationError, match="Re-embed into a new index version"):
        prepare_stores(tiny, spec_for(DEFAULT_MODEL))  # 384 into the 48 index
