"""The stage chain both pipelines share, as one composite transform.

Each lane (fast: text formats, office, PDFs with a text layer; slow: OCR and
very large files) is its own branch from parsing to writing, so a slow OCR
job never holds back the fast lane (on Dataflow/Flink each branch scales on
its own). Outputs are left as lists of PCollections rather than flattened:
FnApiRunner's streaming mode stalls on ``Flatten``, so consumers apply their
sink to each PCollection instead.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.embedding.models import ModelSpec
from ragsync.index.operations import (
    ApplyPermissions,
    DeleteStaleChildren,
    RecordDuplicates,
    RefreshCopies,
    WriteDocuments,
)
from ragsync.model import Lane
from transforms.chunk import ChunkDocuments
from transforms.embed import EmbedChunks
from transforms.fetch import ACL_ONLY, DUPLICATE, LEFT_COPY, UNCHANGED, FetchDocuments
from transforms.index import UpdateIndex
from transforms.lanes import HandToSlowLane
from transforms.parse import STALE_CHILDREN, ParseDocuments, RouteByType
from transforms.progress import ListingTally


class _IndexLane(beam.PTransform):
    """Parse, chunk, diff, embed and write the documents of one lane.

    Input: ``FetchedDocument``. Outputs: ``written`` (``DocumentPlan``) and
    ``dead`` (list of ``DeadLetter`` PCollections).

    Args:
        chain: the settings, model, expected total and progress switch.
        lane: ``fast`` or ``slow`` (which timeout the parse has).
    """

    def __init__(self, chain: IndexFetchedDocuments, lane: str) -> None:
        super().__init__()
        self.chain = chain
        self.lane = lane

    def expand(self, docs: beam.PCollection) -> dict[str, Any]:
        c = self.chain
        s, spec, progress, total = c.settings, c.spec, c.show_progress, c.total
        parsed = docs | "Parse" >> ParseDocuments(s, self.lane)
        stale = parsed[STALE_CHILDREN] | "DeleteStaleChildren" >> UpdateIndex(
            s, spec.dim, DeleteStaleChildren()
        )
        chunked = parsed["parsed"] | "ChunkDocuments" >> ChunkDocuments(
            s, total=total, show_progress=progress
        )
        # Both pipelines batch embeddings per bundle (see transforms/embed.py).
        embedded = chunked["plans"] | "EmbedChunks" >> EmbedChunks(s, spec, show_progress=progress)
        written = embedded["embedded"] | "WriteIndexes" >> UpdateIndex(
            s, spec.dim, WriteDocuments(), total=total, show_progress=progress
        )
        return {
            "written": written["written"],
            "superseded": written["superseded"],
            "dead": [*parsed["dead"], stale["dead"], chunked["dead"], *embedded["dead"], written["dead"]],
        }


class IndexFetchedDocuments(beam.PTransform):
    """Route fetched documents by type, then per lane parse, chunk, diff,
    embed and write: the part of the chain after the fetch, shared by
    :class:`IndexDocuments` and the parser/chunker backfills that re-read
    stored raw copies (``beam_pipelines.reindex``).

    Input: ``FetchedDocument``. Outputs (a dict of lists of PCollections):
    ``written`` and ``superseded`` (``DocumentPlan``), ``dead`` (``DeadLetter``).

    Args: as :class:`IndexDocuments` (all but ``group_duplicates``).
    """

    def __init__(
        self,
        settings: Settings,
        spec: ModelSpec,
        *,
        total: int | ListingTally = 0,
        show_progress: bool = False,
        slow_handoff: bool = False,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.spec = spec
        self.total = total
        self.show_progress = show_progress
        self.slow_handoff = slow_handoff

    def expand(self, docs: beam.PCollection) -> dict[str, list[beam.PCollection]]:
        routed = docs | "RouteByType" >> RouteByType(self.settings)
        fast = routed[Lane.FAST.value] | "FastLane" >> _IndexLane(self, Lane.FAST.value)
        out: dict[str, list[beam.PCollection]] = {
            "written": [fast["written"]],
            "superseded": [fast["superseded"]],
            "dead": [routed["dead"], *fast["dead"]],
        }
        if self.slow_handoff:
            handed = routed[Lane.SLOW.value] | "HandToSlowLane" >> HandToSlowLane(self.settings)
            out["dead"].append(handed["dead"])
            return out
        slow = routed[Lane.SLOW.value] | "SlowLane" >> _IndexLane(self, Lane.SLOW.value)
        out["written"].append(slow["written"])
        out["superseded"].append(slow["superseded"])
        out["dead"].extend(slow["dead"])
        return out


class IndexDocuments(IndexFetchedDocuments):
    """Fetch and hash, route by type, then per lane parse, chunk, diff, embed
    and write.

    Input: ``SourceFile`` (from a listing or an upsert event).
    Outputs (a dict; each value a list of PCollections, one per branch):
      ``written``: ``DocumentPlan`` of each document now live;
      ``superseded``: ``DocumentPlan`` overtaken by a newer event (not written);
      ``unchanged``, ``duplicates``, ``acl_updated``: ``FetchedDocument``
      that needed no parse/embed (same bytes; an exact copy of another
      document; only new permissions);
      ``dead``: ``DeadLetter`` from every stage.

    Args:
        settings: stores and limits.
        spec: the embedding model.
        group_duplicates: bounded input: link copies within one run
            (GroupByKey). False for unbounded input: link against the catalog
            only. Either way embeddings are batched within a bundle.
        total: expected documents, for progress lines (a ``ListingTally``
            while a backfill lists: the total once the listing is complete).
        show_progress: print progress to stderr.
        slow_handoff: event-driven work only: a document found to need the
            slow lane is not parsed here; its event moves to the queue's
            ``slow`` lane (``transforms.lanes.HandToSlowLane``), which another
            pipeline serves, so a scan never holds back a wiki edit.
    """

    def __init__(
        self, settings: Settings, spec: ModelSpec, *, group_duplicates: bool = True, **chain: Any
    ) -> None:
        super().__init__(settings, spec, **chain)
        self.group_duplicates = group_duplicates

    def expand(self, files: beam.PCollection) -> dict[str, list[beam.PCollection]]:
        s, spec = self.settings, self.spec
        fetched = files | "FetchDocuments" >> FetchDocuments(s, group_duplicates=self.group_duplicates)
        indexed = super().expand(fetched["process"])
        duplicates = fetched[DUPLICATE] | "RecordDuplicates" >> UpdateIndex(s, spec.dim, RecordDuplicates())
        left = fetched[LEFT_COPY] | "RefreshCopies" >> UpdateIndex(s, spec.dim, RefreshCopies())
        acl = fetched[ACL_ONLY] | "ApplyAclChanges" >> UpdateIndex(s, spec.dim, ApplyPermissions())
        return {
            "written": indexed["written"],
            "superseded": indexed["superseded"],
            UNCHANGED: [fetched[UNCHANGED]],
            "duplicates": [duplicates["recorded"]],
            "acl_updated": [acl["updated"]],
            "dead": [fetched["dead"], *indexed["dead"], acl["dead"], duplicates["dead"], left["dead"]],
        }
