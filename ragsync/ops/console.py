"""A ragsync process on a console: third-party log noise off and the
model offline (:func:`quiet_environment`), and an error line on stderr
(:func:`fail`). The ``ragsync`` command line and the Dataflow templates'
launchers (``beam_pipelines.template``) both start this way.
"""

from __future__ import annotations

import logging
import os
import sys

from ragsync.ops.display import safe_text


def quiet_environment() -> None:
    """Offline model loading and no third-party log noise on the console.

    Beam, gRPC (used by Milvus Lite), pymilvus and transformers log warnings
    about optional features this tool does not use; ragsync's own progress
    and errors still print.
    """
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("GRPC_VERBOSITY", "NONE"),
        ("OMP_THREAD_LIMIT", "1"),
    ):
        os.environ.setdefault(key, value)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(logging.ERROR)
    for noisy in ("apache_beam", "absl", "grpc", "grpc._server", "pymilvus", "transformers", "root"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)


def fail(message: object, code: int, *, prog: str = "ragsync") -> int:
    """Print ``prog: message`` to stderr (control characters made visible);
    returns ``code``, the command's exit code."""
    print(safe_text(f"{prog}: {message}"), file=sys.stderr)
    return code
