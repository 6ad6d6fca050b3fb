"""Fault injection: the points where a crash test stops the index service.

The service calls its :class:`WriteHooks` at fixed points of a write
(default: nothing). ``RAGSYNC_WRITE_HOOKS`` names a factory of hooks
(``module:function``) that :func:`hooks_from_environment` imports where the
service is opened (each worker process); ``tests/crash_hooks.py`` holds the
tests' factories.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragsync.errors import ConfigurationError
from ragsync.model import DocumentPlan

HOOKS_ENV = "RAGSYNC_WRITE_HOOKS"
"""Environment variable naming a factory of :class:`WriteHooks`
(``package.module:function``, called without arguments); empty = no hooks."""


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class WriteHooks:
    """Callables a writer calls at fixed points of :meth:`IndexService.write_batch`
    (fault injection for crash tests; every default does nothing). A hook may
    stop the process; whatever it raises fails the documents of that step.

    Attributes:
        after_index_writes: ``(n)``, once the index upsert of a batch is done
            and before any catalog row of that batch is written, once per
            document the upsert wrote, ``n`` its running number in this
            writer (1, 2, ...).
        before_flip: ``(n, plan)``, before the ``n``-th version flip of this
            writer, once the document's new chunks are in both indexes and
            its chunk rows pending in the catalog.
        after_flip: ``(n, plan)``, after the ``n``-th version flip, before the
            document's vanished chunks are deleted.
        after_reembedded_documents: ``(n)``, after a re-embedding batch is in
            the target version's stores and its progress recorded, ``n`` the
            documents this process has re-embedded so far
            (``beam_pipelines.reembed``).
    """

    after_index_writes: Callable[[int], None] = _nothing
    before_flip: Callable[[int, DocumentPlan], None] = _nothing
    after_flip: Callable[[int, DocumentPlan], None] = _nothing
    after_reembedded_documents: Callable[[int], None] = _nothing


def load_hooks(spec: str) -> WriteHooks:
    """The hooks a ``module:function`` factory returns.

    Args:
        spec: ``package.module:function`` (a function without arguments that
            returns a ``WriteHooks``), or '' for the default hooks.

    Raises:
        ConfigurationError: ``spec`` is malformed, cannot be imported, or its
            factory returns something else than ``WriteHooks``. What the
            factory itself raises is raised as is.
    """
    if not spec.strip():
        return WriteHooks()
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r}: expected module:function")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r} cannot be loaded: {exc}") from exc
    hooks = factory()
    if not isinstance(hooks, WriteHooks):
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r} returned {type(hooks).__name__}, not WriteHooks")
    return hooks


def hooks_from_environment() -> WriteHooks:
    """:func:`load_hooks` of ``$RAGSYNC_WRITE_HOOKS`` (no hooks when unset)."""
    return load_hooks(os.environ.get(HOOKS_ENV, ""))
