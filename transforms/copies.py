"""Exact copies: the step that refreshes a holder's chunks when one of its
copies left it. What a copy, a holder and their ACL union are, and every
write that keeps them in step, is ``ragsync.index.service`` (``IndexService.sync_copies``)."""

from __future__ import annotations

from collections.abc import Iterator

from ragsync.model import FetchedDocument
from transforms.dead_letters import GuardedStep
from transforms.steps import WriterDoFn


class _RefreshCopiesFn(WriterDoFn):
    """(holder doc id, FetchedDocument that left it) -> the same pair once the
    holder's chunks carry the union of its remaining live copies' ACL ids
    (the copy was edited into other bytes)."""

    def process(self, left: tuple[str, FetchedDocument]) -> Iterator[tuple[str, FetchedDocument]]:
        self.writer.sync_copies(left[0])
        yield left


class RefreshCopies(GuardedStep):
    """Input: ``(holder doc id, FetchedDocument)``: a copy that left the
    holder. Outputs: ``refreshed`` (the pairs) and ``dead`` (``DeadLetter``
    of the copy that left)."""

    fn = _RefreshCopiesFn
    label_, output, stage, dead_label = "RefreshCopies", "refreshed", "copies", "CopiesDeadLetters"
