"""The ONNX embedding backends (``onnx``, ``onnx-int8``): export once, run with onnxruntime.

Export (:func:`ensure_export`), from the same local model files torch reads:

1. the whole sentence-transformers model (transformer, pooling, any Dense,
   normalisation) is traced into one ONNX graph (``torch.onnx.export``,
   TorchScript exporter, dynamic batch and sequence axes), with eager
   attention so that
2. onnxruntime's transformer optimizer can fuse attention, layer norms and
   GELU (BERT-family encoders; a graph it cannot fuse is kept as exported);
3. ``onnx-int8``: onnxruntime dynamic quantization of the MatMul weights to
   int8, per channel, reduced range (AVX2 CPUs without VNNI would saturate
   full-range u8 x s8 products).

Each step's output is checked against torch on a few sentences (cosine >=
:data:`MIN_COSINE`); a worse export is refused, not cached. Exports live in
``{cache_dir}/onnx/{model}-{fingerprint}/`` (``cache_dir``: the
``model_cache_dir`` setting, else ``ragsync.config.default_model_cache_dir``:
one export per user and model, shared by every home) (``model.onnx``,
``model_int8.onnx``, ``export.json``), written to a temporary directory and
renamed into place, so a crash never leaves a half export and two processes
exporting at once both end with a whole one. A changed model directory has a
new fingerprint and so a new export. No file is downloaded: the optimum
package's exporter needs a transformers older than the one installed, so the
export uses torch and onnxruntime directly.

Inference needs only onnxruntime, numpy and the model's ``tokenizer.json``
(torch is not imported): texts are stripped (as sentence-transformers does),
prefixed and tokenized with truncation at the spec's token limit. On CPU each
text is its own onnxruntime run (:data:`CPU_ROWS_PER_RUN`): a text's vector
then never depends on the texts it was batched with (``onnx-int8`` quantizes
activations with one scale per run, so a padded neighbour moved vectors by up
to 3 % cosine) and no time goes to padding (on 608 real chunks of mixed
length, 2 cores: 6.7 s one per run vs 12.4 s in length-sorted runs of 32;
fp32 8.8 vs 20.2 s). On CUDA, where a run's fixed cost dominates, texts are
sorted by length and run :data:`BATCH` at a time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from ragsync.config import default_model_cache_dir
from ragsync.embedding.base import EmbeddingModel, ModelSpec, SentenceTransformerModel, model_fingerprint
from ragsync.errors import ConfigurationError

FP32_FILE = "model.onnx"
INT8_FILE = "model_int8.onnx"
MANIFEST = "export.json"
BATCH = 32
"""Texts per onnxruntime run on CUDA (sorted by length first: less padding)."""
CPU_ROWS_PER_RUN = 1
"""Texts per onnxruntime run on CPU: one, so vectors are independent of batching."""
MIN_COSINE = {"onnx": 0.99, "onnx-int8": 0.98}
"""Least cosine similarity to torch's vectors an export must reach on the check sentences."""

CHECK_SENTENCES = (
    "The cat sits on the mat.",
    "Quarterly revenue rose by 12 percent compared with the previous year.",
    "How do I reset my password?",
    "Employees may claim a hotel room of up to 200 pounds a night in London; keep the receipts.",
    "Le chat est assis sur le tapis.",
)

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_dir(spec: ModelSpec) -> str:
    """Where the exports of ``spec``'s model are kept."""
    root = spec.cache_dir or default_model_cache_dir()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(spec.path.rstrip(os.sep)) or spec.name)
    if slug in ("model", "_"):
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec.name)[-60:]
    return os.path.join(root, "onnx", f"{slug}-{model_fingerprint(spec.path)}")


def ensure_export(spec: ModelSpec) -> str:
    """The ONNX file for ``spec.backend``, exported first if it is not cached.

    Returns:
        Path of ``model.onnx`` (``onnx``) or ``model_int8.onnx`` (``onnx-int8``).

    Raises:
        ConfigurationError: the backend is not an ONNX one, onnxruntime is
            missing, or the export disagrees with torch.
    """
    if spec.backend not in MIN_COSINE:
        raise ConfigurationError(f"{spec.backend!r} is not an ONNX backend")
    final = export_dir(spec)
    want = INT8_FILE if spec.backend == "onnx-int8" else FP32_FILE
    if os.path.exists(os.path.join(final, want)):
        return os.path.join(final, want)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=os.path.dirname(final))
    os.chmod(tmp, 0o755)
    try:
        manifest: dict[str, Any] = {"source": spec.path, "name": spec.name}
        if os.path.exists(os.path.join(final, FP32_FILE)):
            shutil.copy2(os.path.join(final, FP32_FILE), os.path.join(tmp, FP32_FILE))
            old = _read_manifest(final)
            manifest.update({k: v for k, v in old.items() if k not in manifest})
        else:
            manifest.update(_export_fp32(spec, os.path.join(tmp, FP32_FILE)))
        if spec.backend == "onnx-int8":
            manifest.update(_quantize(spec, os.path.join(tmp, FP32_FILE), os.path.join(tmp, INT8_FILE)))
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=1, sort_keys=True)
        _install(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(final, want)


def _read_manifest(directory: str) -> dict[str, Any]:
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as fh:
            data = json.load(fh)
            return data if isinstance(data, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


def _install(tmp: str, final: str) -> None:
    """Move the finished export into place: a rename when ``final`` is
    absent; else the new files are renamed into it one by one (each rename is
    atomic, and a file already there is the same export)."""
    try:
        os.rename(tmp, final)
        return
    except OSError:
        pass
    for name in (FP32_FILE, INT8_FILE, MANIFEST):
        src = os.path.join(tmp, name)
        if os.path.exists(src) and (name == MANIFEST or not os.path.exists(os.path.join(final, name))):
            os.replace(src, os.path.join(final, name))


def _reference(spec: ModelSpec) -> np.ndarray:
    """torch's vectors for the check sentences (the spec's passage prefix)."""
    torch_spec = replace(spec, backend="torch", device="cpu", query_prefix="", cache_dir="")
    return SentenceTransformerModel(torch_spec).encode_passages(list(CHECK_SENTENCES))


def _check(spec: ModelSpec, onnx_path: str, backend: str) -> float:
    """Least cosine between the ONNX file's and torch's vectors.

    Raises:
        ConfigurationError: below ``MIN_COSINE[backend]``.
    """
    probe = replace(spec, model_version="", backend=backend, device="", query_prefix="", cache_dir="")
    got = OnnxModel(probe, onnx_file=onnx_path).encode_passages(list(CHECK_SENTENCES))
    worst = float(np.min(np.sum(got * _reference(spec), axis=1)))
    if worst < MIN_COSINE[backend]:
        raise ConfigurationError(
            f"the {backend} export of {spec.name} disagrees with torch (cosine {worst:.4f} < "
            f"{MIN_COSINE[backend]}); use --embed-backend torch for this model"
        )
    return round(worst, 5)


def _export_fp32(spec: ModelSpec, out: str) -> dict[str, Any]:
    """Trace the sentence-transformers model into ``out``, then fuse it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    started = time.monotonic()
    try:
        st = SentenceTransformer(spec.path, device="cpu", model_kwargs={"attn_implementation": "eager"})
    except (TypeError, ValueError):  # a model class without the eager switch
        st = SentenceTransformer(spec.path, device="cpu")
    st.eval()
    sample = st.tokenizer(
        ["a short text", "a somewhat longer second text"], padding=True, return_tensors="pt"
    )
    names = [n for n in _INPUTS if n in sample]

    class _Whole(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return self.model(dict(zip(names, inputs, strict=True)))["sentence_embedding"]

    axes: dict[str, dict[int, str]] = {n: {0: "batch", 1: "tokens"} for n in names}
    axes["sentence_embedding"] = {0: "batch"}
    raw = out + ".raw"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Whole(st).eval(),
            tuple(sample[n] for n in names),
            raw,
            dynamo=False,
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            opset_version=17,
        )
    fused = _fuse(spec, raw, out)
    if not fused:
        os.replace(raw, out)
    else:
        os.remove(raw)
    cosine = _check(spec, out, "onnx")
    return {
        "exported_at": time.time(),
        "export_seconds": round(time.monotonic() - started, 1),
        "fused": fused,
        "inputs": names,
        "cosine_fp32": cosine,
        "torch": torch.__version__,
        "onnxruntime": _ort_version(),
    }


def _fuse(spec: ModelSpec, raw: str, out: str) -> bool:
    """onnxruntime's BERT optimizer (attention, skip layer norm, GELU
    fusion) with the head count and width from ``config.json``; False when
    the model is not a fusable encoder (the raw export is used)."""
    try:
        with open(os.path.join(spec.path, "config.json"), encoding="utf-8") as fh:
            conf = json.load(fh)
        heads, hidden = int(conf["num_attention_heads"]), int(conf["hidden_size"])
        import logging

        from onnxruntime.transformers.optimizer import optimize_model

        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        optimized = optimize_model(raw, model_type="bert", num_heads=heads, hidden_size=hidden)
        optimized.save_model_to_file(out)
        return True
    except Exception:  # noqa: BLE001 - any failure keeps the unfused, equally correct graph
        return False


def _quantize(spec: ModelSpec, fp32: str, out: str) -> dict[str, Any]:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.monotonic()
    import logging

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))
    quantize_dynamic(
        fp32,
        out,
        op_types_to_quantize=["MatMul"],
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )
    cosine = _check(spec, out, "onnx-int8")
    return {"quantize_seconds": round(time.monotonic() - started, 1), "cosine_int8": cosine}


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


class OnnxModel(EmbeddingModel):
    """A sentence-transformers model run by onnxruntime (``onnx`` or
    ``onnx-int8``), exported on first use (:func:`ensure_export`).

    Args:
        spec: the model; ``spec.backend`` picks the file.
        onnx_file: run this file instead of the cached export (export checks).
        threads: onnxruntime intra-op threads; 0 = onnxruntime's default
            (one per core).

    Raises:
        ConfigurationError: on first encode, when onnxruntime is missing or
            the export fails its check.
    """

    def __init__(self, spec: ModelSpec, *, onnx_file: str = "", threads: int = 0) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = spec.version
        self.dim = spec.dim
        self.onnx_file = onnx_file
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: list[str] = []
        self._rows_per_run = CPU_ROWS_PER_RUN

    def _load(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - onnxruntime is a dependency
            raise ConfigurationError("the ONNX backends need onnxruntime: pip install onnxruntime") from exc
        from tokenizers import Tokenizer

        path = self.onnx_file or ensure_export(self.spec)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        if self.spec.device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        session = ort.InferenceSession(path, options, providers=providers)
        on_gpu = session.get_providers()[0] != "CPUExecutionProvider"
        self._rows_per_run = BATCH if on_gpu else CPU_ROWS_PER_RUN
        tok_file = os.path.join(self.spec.path, "tokenizer.json")
        if not os.path.exists(tok_file):
            raise ConfigurationError(f"the ONNX backends need {tok_file} (a fast tokenizer)")
        tok = Tokenizer.from_file(tok_file)
        tok.no_padding()
        tok.enable_truncation(max_length=self.spec.max_seq_length)
        self._inputs = [i.name for i in session.get_inputs()]
        self._pad_id = _pad_id(self.spec.path)
        self._tokenizer = tok
        self._session = session

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        if self._session is None:
            self._load()
        prefix = self.spec.query_prefix if is_query else self.spec.passage_prefix
        encodings = self._tokenizer.encode_batch([prefix + t.strip() for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(texts), self.dim), np.float32)
        step = self._rows_per_run
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            width = max(len(encodings[i].ids) for i in rows)
            feed = {name: np.zeros((len(rows), width), np.int64) for name in _INPUTS}
            feed["input_ids"].fill(self._pad_id)
            for r, i in enumerate(rows):
                e = encodings[i]
                n = len(e.ids)
                feed["input_ids"][r, :n] = e.ids
                feed["attention_mask"][r, :n] = e.attention_mask
                feed["token_type_ids"][r, :n] = e.type_ids
            result = self._session.run(None, {k: feed[k] for k in self._inputs})[0]
            out[rows] = result
        return out


def _pad_id(path: str) -> int:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            return int(json.load(fh).get("pad_token_id") or 0)
    except (OSError, ValueError, TypeError):
        return 0
