"""Child documents: e-mail attachments and archive members indexed as documents of their own.

Parsing returns a container's attachments unparsed (``ParseResult.attachments``).
Each becomes a *child document*:

* its own id: ``ids.doc_id(tenant, source, ids.child_object_id(parent object
  id, attachment name))``, stable across runs, so an edited parent updates its
  children in place;
* the parent's tenant, source, version, groups and deny groups (its ACL id);
  never an event id of its own (the parent's event is acknowledged by the
  parent's write; a child's dead letter is the child's);
* its own content hash and raw copy; detected and parsed like any document.

A child that is itself a container (an e-mail forwarded as an attachment)
has children too. All children of one top-level parent share one
``ChildBudget`` over the archive limits (``ArchiveLimits``): a parent whose
attachments cross a limit is an ``archive_bomb`` and none of its children are
indexed. The same budget holds the time budget per parent
(``ArchiveLimits.max_children_s``): once the children have spent it being
parsed, the parent stops expanding and every remaining child is a
``too_large`` dead letter of its own (``ChildTimeBudgetError``) while the
children already parsed, the parent and the rest of the run go on. Any other
failure of a child (corrupt, no text, unsupported) is that child's dead letter
only.

Pure Python, no Beam: ``transforms/parse.py`` runs it in the parse step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ragsync import ids
from ragsync.errors import ArchiveBombError, ChildTimeBudgetError, RagsyncError
from ragsync.ingest.detect import detect_mime
from ragsync.model import Attachment, FetchedDocument
from ragsync.parsing import DEFAULT_OCR_LANGUAGES, ArchiveLimits, ParseResult, parse


def child_document(parent: FetchedDocument, member_name: str, data: bytes, raw_uri: str) -> FetchedDocument:
    """The fetched record of one attachment of ``parent``.

    Args:
        parent: the container document (top level or itself a child).
        member_name: the attachment's unique name within the parent
            (``Attachment.name``; hostile text, only a label).
        data: the attachment's bytes.
        raw_uri: where its raw copy is (``Settings.raw_uri`` of its hash).

    Returns:
        A ``FetchedDocument`` with the child's own doc id, object id
        (``ids.child_object_id``), uri (the parent's ``#`` the escaped name),
        content hash and size; the parent's tenant, source, versions, ACL id
        and lane; no event id and no attempts; ``mime`` unset.
    """
    object_id = ids.child_object_id(parent.source.source_object_id, member_name)
    source = replace(
        parent.source,
        source_object_id=object_id,
        uri=ids.child_object_id(parent.source.uri, member_name),
        size=len(data),
        event_id="",
        attempts=0,
    )
    doc_id = ids.doc_id(source.tenant_id, source.source_id, object_id)
    return FetchedDocument(
        doc_id=doc_id,
        source=source,
        content_hash=ids.content_hash(data),
        raw_uri=raw_uri,
        size=len(data),
        acl_id=parent.acl_id,
        canonical_doc_id=doc_id,
        lane=parent.lane,
    )


def past_time_budget(started_at: float, now: float, budget_s: float, parsed: int) -> bool:
    """Whether a parent's children have spent their time budget.

    The budget is judged on the children's parsing: until one child has been
    parsed there is nothing to judge (the first child is always parsed, so a
    parent with one slow attachment still gets it).

    Args:
        started_at: when the parent began expanding (monotonic seconds).
        now: the time of the check (same clock).
        budget_s: the time budget per parent (``ArchiveLimits.max_children_s``).
        parsed: children parsed so far (successfully or not).

    Returns:
        True once at least one child was parsed and more than ``budget_s``
        seconds have passed: no further child is parsed.
    """
    return parsed > 0 and now - started_at > budget_s


@dataclass
class ChildBudget:
    """What the children of one top-level document may take, against the archive limits.

    Attributes:
        limits: the archive limits (``Settings.archive_limits()``).
        name: the top-level document's name, for messages.
        bytes_used: bytes of every child so far.
        count: children so far (at every nesting level).
        started_at: when the top-level document began expanding (the clock
            of ``expand_children``), for the time budget per parent.
        parsed: children parsed so far (successfully or not).
        out_of_time: children not parsed because the time budget was spent.
    """

    limits: ArchiveLimits
    name: str
    bytes_used: int = 0
    count: int = 0
    started_at: float = field(default_factory=time.monotonic)
    parsed: int = 0
    out_of_time: int = 0

    def time_left(self, now: float) -> bool:
        """Whether another child may still be parsed at ``now`` (see
        ``past_time_budget``; once spent, the budget stays spent)."""
        if self.out_of_time:
            return False
        return not past_time_budget(self.started_at, now, self.limits.max_children_s, self.parsed)

    def over_time(self, attachment: Attachment) -> ChildTimeBudgetError:
        """The dead letter's error of a child left unparsed by the time budget (counted)."""
        self.out_of_time += 1
        return ChildTimeBudgetError(
            f"{self.name}: {attachment.name!r} was not parsed: the document's attachments and members "
            f"passed the time budget of {self.limits.max_children_s:g} s per parent"
        )

    def take(self, attachment: Attachment) -> None:
        """Charge one child.

        Raises:
            ArchiveBombError: more children than ``max_members``, more bytes
                than ``max_bytes``, or a child deeper than ``max_depth``.
        """
        self.count += 1
        self.bytes_used += len(attachment.data)
        if self.count > self.limits.max_members:
            raise ArchiveBombError(f"{self.name}: more than {self.limits.max_members} child documents")
        if self.bytes_used > self.limits.max_bytes:
            raise ArchiveBombError(f"{self.name}: child documents exceed {self.limits.max_bytes} bytes")
        if attachment.depth > self.limits.max_depth:
            raise ArchiveBombError(
                f"{self.name}: {attachment.name!r} is nested deeper than {self.limits.max_depth} containers"
            )


@dataclass(frozen=True)
class Child:
    """One child document and what parsing it gave.

    Attributes:
        doc: its fetched record (``mime`` set by detection).
        parent_doc_id: the container it came from.
        data: its bytes (to be stored at ``doc.raw_uri``).
        result: the parse, None when it failed.
        error: the failure (a dead letter for this child only), None when parsed.
    """

    doc: FetchedDocument
    parent_doc_id: str
    data: bytes = field(repr=False)
    result: ParseResult | None = None
    error: RagsyncError | None = None


def expand_children(
    parent: FetchedDocument,
    attachments: Iterable[Attachment],
    *,
    raw_uri: Callable[[str], str],
    limits: ArchiveLimits,
    max_bytes: int,
    max_pages: int,
    ocr_languages: str = DEFAULT_OCR_LANGUAGES,
    budget: ChildBudget | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Child]:
    """Detect and parse every attachment of ``parent`` (and of child containers), depth first.

    Before each child is parsed the time budget per parent is checked
    (``ArchiveLimits.max_children_s``, from when the top-level call began;
    ``past_time_budget``): once the children parsed so far have spent it,
    that child and every later one (at any level) are returned unparsed with
    a ``ChildTimeBudgetError`` (``too_large``), each its own dead letter; a
    child container left unparsed has no children.

    Args:
        parent: the container document.
        attachments: its ``ParseResult.attachments``.
        raw_uri: content hash -> raw copy uri (``Settings.raw_uri``).
        limits: archive limits; also passed to each child's parse.
        max_bytes: per-document byte limit of ``parse``.
        max_pages: per-document page limit of ``parse``.
        ocr_languages: Tesseract's languages (``Settings.ocr_languages``), for ``parse``.
        budget: shared by the whole tree (created for a top-level call).
        clock: monotonic seconds (tests give a fake one).

    Returns:
        Every child, in attachment order, a child container followed by its own children.

    Raises:
        ArchiveBombError: the children together cross a limit, or a child
            container is a bomb itself: the parent is dead-lettered and no
            child is kept.
    """
    if budget is None:
        budget = ChildBudget(limits, parent.source.source_object_id.rsplit("/", 1)[-1], started_at=clock())
    out: list[Child] = []
    for att in attachments:
        budget.take(att)
        doc = child_document(parent, att.name, att.data, raw_uri(ids.content_hash(att.data)))
        filename = att.name.rsplit("/", 1)[-1]
        doc = replace(doc, mime=detect_mime(att.data, filename) if att.data else "")
        if not budget.time_left(clock()):
            out.append(Child(doc, parent.doc_id, att.data, error=budget.over_time(att)))
            continue
        budget.parsed += 1
        read = functools.partial(
            parse, max_bytes=max_bytes, max_pages=max_pages, limits=limits, ocr_languages=ocr_languages
        )
        try:
            result = read(att.data, doc.mime, filename=filename, depth=att.depth)
        except ArchiveBombError:
            raise
        except RagsyncError as exc:
            out.append(Child(doc, parent.doc_id, att.data, error=exc))
            continue
        out.append(Child(doc, parent.doc_id, att.data, result=result))
        if result.attachments:
            out += expand_children(
                doc,
                result.attachments,
                raw_uri=raw_uri,
                limits=limits,
                max_bytes=max_bytes,
                max_pages=max_pages,
                ocr_languages=ocr_languages,
                budget=budget,
                clock=clock,
            )
    return out


def stale_children(old_child_ids: Iterable[str], new_child_ids: Iterable[str]) -> list[str]:
    """Children an edit of their parent left behind (to be deleted).

    Args:
        old_child_ids: the parent's children in the catalog before the edit.
        new_child_ids: the children the new version has.

    Returns:
        The old ids not among the new ones, sorted.
    """
    return sorted(set(old_child_ids) - set(new_child_ids))
