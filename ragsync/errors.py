"""One error taxonomy for every stage.

Each error carries an ``error_class`` (a short stable string stored in the
dead-letter table) and whether it is permanent (dead-letter at once) or
transient (retry with backoff first).
"""

from __future__ import annotations

# Stable names stored in dead_letters.error_class.
ERROR_CLASSES = (
    "empty",  # zero bytes
    "encrypted",  # needs a password we do not have
    "corrupt",  # the bytes are not a valid file of their type
    "unsupported",  # a content type no parser handles
    "too_large",  # above the configured size or page limit
    "archive_bomb",  # an archive over its expansion limits (bytes, members, nesting, ratio)
    "no_text",  # parsed fine but nothing to index
    "ocr_below_bar",  # every page fell under the OCR confidence bar
    "timeout",  # parser ran past its time limit
    "crash",  # parser process died (segfault, out of memory)
    "no_permissions",  # ACL could not be read: fail closed
    "fetch_failed",  # bytes could not be read
    "fetch_timeout",  # reading the bytes ran past the fetch time limit
    "invalid_event",  # malformed input record
    "embed_failed",  # the model failed on this chunk
    "write_failed",  # a store refused the write
    "internal",  # a bug: anything not classified above
    "configuration",  # the operator must change a setting
)


# Classes that fail the same way on every attempt: dead-lettered at once.
# Every other class is retried with backoff before it is dead-lettered.
PERMANENT_CLASSES = frozenset(
    {
        "empty",
        "encrypted",
        "corrupt",
        "unsupported",
        "too_large",
        "archive_bomb",
        "no_text",
        "ocr_below_bar",
        "no_permissions",
        "invalid_event",
        "fetch_timeout",
        "configuration",
    }
)


def is_retryable(error_class: str) -> bool:
    """True when an error of this class may go away on a later attempt."""
    return error_class not in PERMANENT_CLASSES


class RagsyncError(Exception):
    """Base class. A subclass states its ``error_class`` (one of
    ``ERROR_CLASSES``) and, when transient, ``permanent=False`` in its class
    header: ``class FetchError(RagsyncError, error_class="fetch_failed",
    permanent=False)``; without them it keeps its base's."""

    error_class = "internal"
    permanent = True

    def __init_subclass__(
        cls, *, error_class: str = "", permanent: bool | None = None, **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        if error_class:
            cls.error_class = error_class
        if permanent is not None:
            cls.permanent = permanent


class ConfigurationError(RagsyncError, error_class="configuration"):
    """The operator must change a setting; the message says which."""


class EmptyDocumentError(RagsyncError, error_class="empty"):
    """Zero bytes."""


class EncryptedDocumentError(RagsyncError, error_class="encrypted"):
    """The document needs a password we do not have."""


class CorruptDocumentError(RagsyncError, error_class="corrupt"):
    """The bytes are not a valid file of their type."""


class UnsupportedFormatError(RagsyncError, error_class="unsupported"):
    """A content type no parser handles."""


class TooLargeError(RagsyncError, error_class="too_large"):
    """Above the configured size or page limit."""


class ChildTimeBudgetError(TooLargeError):
    """A child document not parsed: its parent's children had already spent
    the time budget per parent (``ArchiveLimits.max_children_s``)."""


class ArchiveBombError(RagsyncError, error_class="archive_bomb"):
    """An archive expands past a limit: total bytes, member count, nesting depth or compression ratio."""


class NoTextError(RagsyncError, error_class="no_text"):
    """Parsed fine, but nothing to index."""


class OcrBelowBarError(RagsyncError, error_class="ocr_below_bar"):
    """Every page fell under the OCR confidence bar."""


class ParserCrashError(RagsyncError, error_class="crash", permanent=False):
    """A parser's native engine failed on its own (not the document's fault),
    or the isolated process reading the bytes died (``ragsync.ops.lifecycle.BoundedChild``)."""


class ParseTimeoutError(RagsyncError, error_class="timeout", permanent=False):
    """Reading a document's bytes (detection, parsing) ran past its time limit."""


class NoPermissionsError(RagsyncError, error_class="no_permissions"):
    """The ACL could not be read: fail closed."""


class FetchError(RagsyncError, error_class="fetch_failed", permanent=False):
    """The bytes could not be read."""


class FetchTimeoutError(RagsyncError, error_class="fetch_timeout"):
    """Reading a document ran past the fetch time limit (not retried on its own:
    a source that hangs would otherwise hold a worker on every restart)."""


class InvalidEventError(RagsyncError, error_class="invalid_event"):
    """A malformed input record."""


class UnknownSourceError(InvalidEventError):
    """An event for a source that is not registered (for the tenant it came for)."""


class OutsideLocationError(InvalidEventError):
    """An address that does not resolve under its source's location, or that
    names something other than a regular file. The message is the same whatever
    exists at the address."""


class WorkerLostError(RagsyncError, error_class="crash"):
    """A worker process of the local runner died during the run (killed, out
    of memory): the run is stopped instead of waiting for it forever; the
    message names the worker and what to do."""


class EmbedFailedError(RagsyncError, error_class="embed_failed"):
    """The embedding model rejected a chunk even alone, or gave a bad vector."""


class WriteError(RagsyncError, error_class="write_failed", permanent=False):
    """A store refused the write."""


def classify(exc_type_name: str, message: str = "") -> str:
    """Map an exception type name (as Beam's dead-letter output reports it)
    to an error class.

    Args:
        exc_type_name: ``type(exc).__name__`` or a qualified name.
        message: the exception message, used for process-level failures.

    Returns:
        One of ``ERROR_CLASSES``.
    """
    name = exc_type_name.rsplit(".", 1)[-1]
    for cls in _all_subclasses(RagsyncError):
        if cls.__name__ == name:
            return str(getattr(cls, "error_class", "internal"))
    if name in ("TimeoutError", "FuturesTimeoutError"):
        return "timeout"
    if name in ("BrokenProcessPool", "MemoryError"):
        return "crash"
    return "internal"


def _all_subclasses(cls: type) -> list[type]:
    out: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


class SyncError(RagsyncError, error_class="fetch_failed"):
    """A sync of a source (``beam_pipelines.sync.run_sync``, a backfill's too)
    did not complete; the message says why and what to do. Here, not beside
    the sync, so that callers catch it without importing the pipelines."""


class AmbiguousSourceError(ConfigurationError):
    """A source id given without its tenant names sources of several tenants."""

    def __init__(self, source_id: str) -> None:
        super().__init__(f"source {source_id!r} exists for several tenants: give the tenant (--tenant)")


class StoreBusyError(ConfigurationError):
    """Another process holds a store this run needs (Milvus Lite's lock): the
    run is refused, the source did nothing wrong (a sync refused so is not
    counted as its failure, ``beam_pipelines.sync``). Its message contains
    :data:`STORE_BUSY`, which survives Beam wrapping the exception."""


STORE_BUSY = "held by another ragsync run"


class ListingFailedError(FetchError):
    """A full listing failed (a shard could not be listed, timed out,
    or a store failed): nothing was deleted."""


def root_cause(exc: BaseException) -> str:
    """A one-line cause of a pipeline failure: the innermost ragsync error's
    class and message when there is one (Beam wraps what a step raised)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in reversed(seen):
        if isinstance(e, RagsyncError):
            return f"[{e.error_class}] {e}"[:1000]
    text = str(seen[-1]) or type(seen[-1]).__name__
    for line in reversed(text.splitlines()):
        if "Error:" in line:
            return line.strip()[:1000]
    return text.strip().splitlines()[-1][:1000] if text.strip() else type(seen[-1]).__name__
