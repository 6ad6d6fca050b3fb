"""Beam's RunInference, imported without torch.

Beam 2.77's ``apache_beam.ml.inference.base`` imports its ``ModelManager``
(GPU memory bookkeeping for ``use_model_manager=True``), whose module imports
torch and scipy at import time: 2-6 s of every process start on 2 cores, and
the ONNX embedding backends need neither. ``base`` already guards that import
(``except ImportError: ModelManager = None``), so the first import of ``base``
here runs with the manager's module marked absent; the mark is removed right
after, so anything that imports the manager itself later still gets it.
ragsync never asks RunInference for the model manager. ``base`` also drops
the stdlib ``resource`` module in the same guard (its memory metric); it is
put back.

If torch or ``base`` is already imported, nothing is blocked (nothing to
save).
"""

from __future__ import annotations

import sys

_MANAGER = "apache_beam.ml.inference.model_manager"
_BASE = "apache_beam.ml.inference.base"


def _import_base() -> None:
    """Import ``apache_beam.ml.inference.base`` without its torch-importing
    model manager (module docstring)."""
    if _BASE in sys.modules or "torch" in sys.modules or _MANAGER in sys.modules:
        return
    sys.modules[_MANAGER] = None  # type: ignore[assignment]  # makes its import raise ImportError
    try:
        import resource

        import apache_beam.ml.inference.base as base
    finally:
        del sys.modules[_MANAGER]
    if getattr(base, "resource", None) is None:
        base.resource = resource  # type: ignore[attr-defined]


_import_base()

from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference  # noqa: E402

__all__ = ["ModelHandler", "PredictionResult", "RunInference"]
