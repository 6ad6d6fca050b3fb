"""JSON parser: ticket records (GitHub issues, Jira REST v2, Redmine) and any other JSON.

A file is one document: a JSON object, a JSON array of objects, or JSONL
(one object per line). Each ticket becomes a level-1 heading (its title), a
paragraph of its fields (state, author, labels...), its description and its
comments in order, each prefixed by the author. JSON that is not a ticket is
flattened to ``a.b.0.c: value`` paragraphs. A ticket bundle (a ticket and its
attachments, ``ragsync.parsing.bundle``) is parsed by :func:`parse_bundle`.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ragsync.errors import CorruptDocumentError
from ragsync.model import Attachment, ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, decode_text, split_paragraphs

#: Flattened key paths kept for non-ticket JSON.
MAX_FLAT_VALUES = 200_000


def _load(text: str) -> tuple[list[Any], int]:
    """Records of a JSON document or of JSONL; returns them and the count of unreadable lines."""
    try:
        value = json.loads(text)
    except ValueError:
        records: list[Any] = []
        bad = 0
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                bad += 1
        if not records:
            raise CorruptDocumentError("not valid JSON or JSONL") from None
        return records, bad
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value, 0
    return [value], 0


def is_github_issue(record: Any) -> bool:
    """Whether a decoded JSON value has the GitHub REST issue/pull request
    shape: ``title`` plus ``body`` or ``user``."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("title"), str)
        and ("body" in record or "user" in record)
    )


def is_jira_issue(record: Any) -> bool:
    """Whether a decoded JSON value has the Jira REST v2 issue shape: ``key``
    and ``fields.summary``."""
    return (
        isinstance(record, dict)
        and "key" in record
        and isinstance(record.get("fields"), dict)
        and "summary" in record["fields"]
    )


def _name(value: Any, *keys: str) -> str:
    """First non-empty of ``keys`` in a dict (a user, status...), or the value itself as text."""
    if isinstance(value, dict):
        for key in keys:
            found = value.get(key)
            if found not in (None, ""):
                return clean_text(str(found))
        return ""
    return clean_text(str(value)) if value not in (None, "") else ""


def _fields_paragraph(pairs: list[tuple[str, str]]) -> RawElement | None:
    lines = [f"{k}: {v}" for k, v in pairs if v]
    return RawElement(ElementType.PARAGRAPH, "\n".join(lines)) if lines else None


def _markdown_body(text: str) -> list[RawElement]:
    """GitHub bodies are Markdown: headings shifted one level below the ticket title."""
    from ragsync.parsing.markdown import parse_markdown

    try:
        parsed = parse_markdown(text.encode("utf-8")).elements
    except Exception:  # noqa: BLE001 - fall back to plain paragraphs
        return [RawElement(ElementType.PARAGRAPH, p) for p in split_paragraphs(text)]
    return [
        RawElement(e.type, e.text, min(6, e.level + 1) if e.type is ElementType.HEADING else e.level, 0)
        for e in parsed
    ]


def _plain(text: Any) -> list[RawElement]:
    """A plain-text field (a description) as paragraphs; nothing when it is not text."""
    if not isinstance(text, str):
        return []
    return [RawElement(ElementType.PARAGRAPH, p) for p in split_paragraphs(text.replace("\r\n", "\n"))]


def _comment(author: str, when: str, body: str) -> list[RawElement]:
    paragraphs = split_paragraphs(body.replace("\r\n", "\n"))
    if not paragraphs:
        return []
    prefix = author or "unknown"
    if when:
        prefix += f" ({when})"
    first = RawElement(ElementType.PARAGRAPH, f"{prefix}: {paragraphs[0]}")
    return [first, *(RawElement(ElementType.PARAGRAPH, p) for p in paragraphs[1:])]


def _github(record: dict[str, Any], meta: dict[str, str]) -> list[RawElement]:
    number = record.get("number")
    title = clean_text(record.get("title") or "")
    heading = f"#{number} {title}" if number is not None else title
    out = [RawElement(ElementType.HEADING, heading or "Issue", 1)]
    labels = ", ".join(_name(label, "name") for label in record.get("labels") or [] if _name(label, "name"))
    kind = "pull request" if record.get("pull_request") else "issue"
    fields = _fields_paragraph(
        [
            ("Type", kind),
            ("State", _name(record.get("state"))),
            ("Author", _name(record.get("user"), "login")),
            ("Assignees", ", ".join(_name(a, "login") for a in record.get("assignees") or [])),
            ("Labels", labels),
            ("Created", _name(record.get("created_at"))),
            ("Closed", _name(record.get("closed_at"))),
            ("URL", _name(record.get("html_url"))),
        ]
    )
    if fields:
        out.append(fields)
    body = record.get("body")
    if isinstance(body, str) and body.strip():
        out.extend(_markdown_body(body))
    comments = record.get("comments")
    if isinstance(comments, list):
        found: list[RawElement] = []
        for comment in comments:
            if isinstance(comment, dict):
                found.extend(
                    _comment(
                        _name(comment.get("user"), "login"),
                        _name(comment.get("created_at")),
                        str(comment.get("body") or ""),
                    )
                )
            elif isinstance(comment, str):
                found.extend(_comment("", "", comment))
        if found:
            out.append(RawElement(ElementType.HEADING, "Comments", 2))
            out.extend(found)
    elif isinstance(comments, int) and comments:
        meta["comments_not_included"] = str(int(meta.get("comments_not_included", "0")) + comments)
    return out


def _jira(record: dict[str, Any]) -> list[RawElement]:
    fields: dict[str, Any] = record["fields"]
    key = clean_text(str(record.get("key") or ""))
    summary = clean_text(str(fields.get("summary") or ""))
    out = [RawElement(ElementType.HEADING, f"{key}: {summary}" if key and summary else key or summary, 1)]
    para = _fields_paragraph(
        [
            ("Type", _name(fields.get("issuetype"), "name")),
            ("Status", _name(fields.get("status"), "name")),
            ("Priority", _name(fields.get("priority"), "name")),
            ("Resolution", _name(fields.get("resolution"), "name")),
            ("Reporter", _name(fields.get("reporter"), "displayName", "name")),
            ("Assignee", _name(fields.get("assignee"), "displayName", "name")),
            ("Components", ", ".join(_name(c, "name") for c in fields.get("components") or [])),
            ("Labels", ", ".join(_name(label) for label in fields.get("labels") or [])),
            ("Fix versions", ", ".join(_name(v, "name") for v in fields.get("fixVersions") or [])),
            ("Created", _name(fields.get("created"))),
            ("Resolved", _name(fields.get("resolutiondate"))),
        ]
    )
    if para:
        out.append(para)
    out.extend(_plain(fields.get("description")))
    block = fields.get("comment")
    comments = block.get("comments") if isinstance(block, dict) else None
    found: list[RawElement] = []
    for comment in comments if isinstance(comments, list) else []:
        if isinstance(comment, dict):
            found.extend(
                _comment(
                    _name(comment.get("author"), "displayName", "name"),
                    _name(comment.get("created")),
                    str(comment.get("body") or ""),
                )
            )
    if found:
        out.append(RawElement(ElementType.HEADING, "Comments", 2))
        out.extend(found)
    changelog = record.get("changelog")
    histories = changelog.get("histories") if isinstance(changelog, dict) else None
    changes: list[RawElement] = []
    for history in histories if isinstance(histories, list) else []:
        if not isinstance(history, dict):
            continue
        who = _name(history.get("author"), "displayName", "name") or "unknown"
        when = _name(history.get("created"))
        for item in history.get("items") or []:
            if not isinstance(item, dict):
                continue
            change = (
                f"{_name(item.get('field'))}: {_name(item.get('fromString')) or '(none)'}"
                f" -> {_name(item.get('toString')) or '(none)'}"
            )
            changes.append(RawElement(ElementType.PARAGRAPH, f"{who} ({when}) changed {change}"))
    if changes:
        out.append(RawElement(ElementType.HEADING, "Changelog", 2))
        out.extend(changes)
    return out


def is_redmine_issue(record: Any) -> bool:
    """Whether a decoded JSON value is a Redmine issue as ``connectors.redmine``
    fetches it: ``{"redmine_issue": {"id", "subject", ...}}``."""
    issue = record.get("redmine_issue") if isinstance(record, dict) else None
    return isinstance(issue, dict) and "subject" in issue and len(record) == 1


def _redmine(record: dict[str, Any]) -> list[RawElement]:
    """An issue: ``#ID subject``, its fields (custom fields included), the
    description, and each journal's note as a comment."""
    issue: dict[str, Any] = record["redmine_issue"]
    subject = clean_text(str(issue.get("subject") or ""))
    out = [RawElement(ElementType.HEADING, f"#{issue.get('id')} {subject}".strip(), 1)]
    custom = [
        (_name(f, "name"), ", ".join(map(str, v)) if isinstance(v, list) else _name(v))
        for f in issue.get("custom_fields") or []
        if isinstance(f, dict)
        for v in [f.get("value")]
    ]
    para = _fields_paragraph(
        [
            ("Project", _name(issue.get("project"), "name")),
            ("Tracker", _name(issue.get("tracker"), "name")),
            ("Status", _name(issue.get("status"), "name")),
            ("Priority", _name(issue.get("priority"), "name")),
            ("Author", _name(issue.get("author"), "name")),
            ("Assignee", _name(issue.get("assigned_to"), "name")),
            ("Category", _name(issue.get("category"), "name")),
            ("Target version", _name(issue.get("fixed_version"), "name")),
            *custom,
            ("Created", _name(issue.get("created_on"))),
            ("Closed", _name(issue.get("closed_on"))),
        ]
    )
    if para:
        out.append(para)
    out.extend(_plain(issue.get("description")))
    found: list[RawElement] = []
    for journal in issue.get("journals") or []:
        if isinstance(journal, dict):
            notes = str(journal.get("notes") or "")
            found.extend(
                _comment(_name(journal.get("user"), "name"), _name(journal.get("created_on")), notes)
            )
    if found:
        out.append(RawElement(ElementType.HEADING, "Comments", 2))
        out.extend(found)
    return out


def _flatten(value: Any, path: str, out: list[RawElement]) -> None:
    if len(out) >= MAX_FLAT_VALUES:
        return
    if isinstance(value, dict):
        for key, child in value.items():
            _flatten(child, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _flatten(child, f"{path}.{index}" if path else str(index), out)
    elif value is not None and str(value).strip():
        text = clean_text(str(value)) if not isinstance(value, bool) else str(value).lower()
        out.append(RawElement(ElementType.PARAGRAPH, f"{path}: {text}" if path else text))


def parse_json(data: bytes) -> RawParse:
    """Parse JSON or JSONL: tickets to structured elements, anything else flattened.

    Args:
        data: a JSON document (object, array) or JSONL bytes.

    Returns:
        Elements with page 0. Metadata: ``records`` (count), ``kind``
        (``github``, ``jira``, ``redmine``, ``json`` or ``mixed``), ``title`` when the file
        holds one ticket, ``skipped_lines`` when JSONL lines were unreadable,
        ``comments_not_included`` when GitHub records only carry a comment
        count (their ``comments_url`` is not fetched).

    Raises:
        CorruptDocumentError: neither valid JSON nor JSONL with a readable line.
    """
    records, bad = _load(decode_text(data))
    meta: dict[str, str] = {"records": str(len(records))}
    kinds: set[str] = set()
    out: list[RawElement] = []
    generic: list[Any] = []
    for record in records:
        if is_jira_issue(record):
            kinds.add("jira")
            out.extend(_jira(record))
        elif is_redmine_issue(record):
            kinds.add("redmine")
            out.extend(_redmine(record))
        elif is_github_issue(record):
            kinds.add("github")
            out.extend(_github(record, meta))
        else:
            kinds.add("json")
            generic.append(record)
    if generic:
        _flatten(generic[0] if len(generic) == 1 else generic, "", out)
        if len(out) >= MAX_FLAT_VALUES:
            meta["truncated"] = "true"
    meta["kind"] = kinds.pop() if len(kinds) == 1 else "mixed"
    if len(records) == 1 and meta["kind"] != "json" and out:
        meta["title"] = out[0].text
    if bad:
        meta["skipped_lines"] = str(bad)
    return RawParse(out, 0, meta)


def parse_bundle(data: bytes, *, depth: int, limits: Any) -> RawParse:
    """Parse a ticket bundle (``ragsync.parsing.bundle``): the ticket's elements,
    and its attachments unparsed.

    Args:
        data: the bundle.
        depth: containers around it (0 at top level).
        limits: ``ArchiveLimits`` (``max_depth``, ``max_attachments``).

    Returns:
        The ticket's elements (:func:`parse_json`) and
        ``Attachments: NAMES``; ``attachments`` at ``depth + 1`` (empty ones
        named, not returned); metadata as the ticket parser's plus
        ``attachments`` (count) and ``attachments_skipped`` past a limit.

    Raises:
        CorruptDocumentError: not a bundle (unreadable JSON, no record, an
            attachment that is not base64).
    """
    from ragsync.parsing.email import finish, unique_name

    try:
        bundle = json.loads(data)
    except ValueError as exc:
        raise CorruptDocumentError(f"not a ticket bundle: {exc}") from None
    record = bundle.get("record") if isinstance(bundle, dict) else None
    files = bundle.get("attachments") if isinstance(bundle, dict) else None
    if not isinstance(record, dict) or not isinstance(files, list):
        raise CorruptDocumentError("not a ticket bundle: no record or no list of attachments")
    raw = parse_json(json.dumps(record, ensure_ascii=False).encode("utf-8"))
    attachments: list[Attachment] = []
    seen: set[str] = set()
    for index, item in enumerate(files, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("data"), str):
            raise CorruptDocumentError(f"ticket bundle: attachment {index} has no data")
        try:
            body = base64.b64decode(item["data"], validate=True)
        except (binascii.Error, ValueError):
            raise CorruptDocumentError(f"ticket bundle: attachment {index} is not base64") from None
        name = unique_name(str(item.get("name") or ""), seen, f"attachment-{index}")
        attachments.append(Attachment(name, body, str(item.get("media_type") or ""), depth + 1))
    return finish(list(raw.elements), dict(raw.metadata or {}), attachments, depth, limits)
