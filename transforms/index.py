"""Every change to the index, as one generic Beam step.

:class:`UpdateIndex` is to ragsync's writes what Beam's ``RunInference`` is
to models: one transform, and a Beam-free operation
(``ragsync.index.operations``: write documents, apply permissions, link
copies, delete) that says how to batch and what to do with a batch. The
step opens one :class:`ragsync.index.service.IndexService` per DoFn
instance in ``setup()`` (with the fault hooks ``$RAGSYNC_WRITE_HOOKS``
names, this step's counters, and Beam's file systems to delete raw copies),
calls the operation in ``process()`` and closes the service in
``teardown()``. Failures become dead letters of the operation's stage, one
per input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.index.hooks import hooks_from_environment
from ragsync.index.operations import IndexOperation
from ragsync.index.service import IndexService
from transforms.dead_letters import ToDeadLetters, batch_item_failure
from transforms.io import delete_if_exists
from transforms.metrics import StageMetrics, counter
from transforms.progress import ListingTally, Progress


class _UpdateIndexFn(beam.DoFn):
    """A batch of the operation's inputs -> its outputs (main and tagged);
    an input that fails on its own goes to ``bad`` with its error."""

    def __init__(
        self, settings: Settings, dim: int, operation: IndexOperation, total: int | ListingTally, show: bool
    ) -> None:
        self.settings = settings
        self.dim = dim
        self.operation = operation
        self.total = total
        self.show = show

    def setup(self) -> None:
        op = self.operation
        self._counters: dict[str, Any] = {}
        self._stage = StageMetrics(op.stage)
        self._progress = Progress(op.stage, "docs", self.total, enabled=self.show)
        self.service: IndexService = op.open(
            self.settings,
            self.dim,
            hooks=hooks_from_environment(),
            count=self._count,
            remove_object=delete_if_exists,
        )

    def _count(self, name: str, n: int = 1) -> None:
        handle = self._counters.get(name)
        if handle is None:
            handle = self._counters[name] = counter(name)
        handle.inc(n)

    def process(self, batch: list[Any]) -> Iterator[Any]:
        yield from self._stage.run(self._apply, batch, elements=len(batch))

    def _apply(self, batch: list[Any]) -> Iterator[Any]:
        op = self.operation
        if op.batch_size == 1:
            # One input: what it raises is its dead letter, with Beam's traceback.
            done = [op.apply_one(self.service, item) for item in batch]
            tagged: list[tuple[str, Any]] = []
            failed: list[tuple[Any, Exception]] = []
        else:
            applied = op.apply(self.service, batch)
            done, tagged, failed = applied.done, applied.tagged, applied.failed
        for name, record in tagged:
            yield beam.pvalue.TaggedOutput(name, record)
        for item, exc in failed:
            yield batch_item_failure(item, exc)
        if op.counter and done:
            self._count(op.counter, len(done))
        for record in done:
            self._progress.add()
            yield record

    def teardown(self) -> None:
        progress = getattr(self, "_progress", None)
        if progress is not None:
            progress.finish()
        service = self.__dict__.pop("service", None)
        if service is not None:
            service.close()


class UpdateIndex(beam.PTransform):
    """Apply one index operation to every input.

    Input: the operation's input records. Outputs (a dict):
    ``operation.output`` (the main output), each of ``operation.outputs``,
    and ``dead`` (``DeadLetter``, stage ``operation.stage``; one per input
    that failed, transient ones retried by the dead-letter sink).

    Args:
        settings: the home.
        dim: the live vectors' dimension.
        operation: what to do (``ragsync.index.operations``).
        total: expected inputs, for progress lines (a ``ListingTally`` while
            a backfill lists).
        show_progress: print progress lines to stderr.
    """

    def __init__(
        self,
        settings: Settings,
        dim: int,
        operation: IndexOperation,
        *,
        total: int | ListingTally = 0,
        show_progress: bool = False,
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError("dim must be positive")
        if operation.batch_size < 1:
            raise ValueError("operation.batch_size must be >= 1")
        self.settings = settings
        self.dim = dim
        self.operation = operation
        self.total = total
        self.show_progress = show_progress

    def expand(self, pcoll: beam.PCollection) -> dict[str, beam.PCollection]:
        op = self.operation
        if op.batch_size == 1:
            batches = pcoll | "One" >> beam.Map(lambda item: [item])
        else:
            batches = pcoll | "Batch" >> beam.BatchElements(
                min_batch_size=op.batch_size, max_batch_size=op.batch_size, element_size_fn=op.size
            )
        fn = _UpdateIndexFn(self.settings, self.dim, op, self.total, self.show_progress)
        out = batches | "Apply" >> beam.ParDo(fn).with_outputs(
            *op.outputs, main=op.output
        ).with_exception_handling(main_tag=op.output)
        result = {op.output: out[op.output], "dead": out["bad"] | "DeadLetters" >> ToDeadLetters(op.stage)}
        for name in op.outputs:
            result[name] = out[name]
        return result
