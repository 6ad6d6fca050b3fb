"""What the event-bus tests send and expect, the same for every bus (Pub/Sub
through the emulator, recorded Kafka records): three upserts without
``acl_groups`` over a source whose default groups are ``staff``, a body that
is not JSON, an upsert for a source nobody registered and one whose
``content_uri`` lies outside the source. Addresses are relative to the
source's folder (an event may give them so), so recorded bytes hold in any
checkout.

Expected: the three notes indexed for ``staff`` only (the default groups),
three ``invalid_event`` dead letters of stage ``admit`` with their reasons.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ragsync.config import Settings, open_catalog
from ragsync.query.search import hybrid_query

TENANT, SOURCE, DEFAULT_GROUPS = "acme", "notes", ("staff",)
NOTES = {
    "harbour.md": "# Harbour\n\nThe harbour crane lifts forty tonnes on the night shift.\n",
    "canteen.md": "# Canteen\n\nThe canteen serves soup on Thursdays from noon.\n",
    "parking.md": "# Parking\n\nThe parking garage closes for repairs in May.\n",
}
QUERIES = {
    "harbour.md": "harbour crane tonnes",
    "canteen.md": "canteen soup Thursdays",
    "parking.md": "parking garage repairs",
}
EXPECTED_DEAD = [
    ("admit", "invalid_event", "not valid JSON"),
    ("admit", "invalid_event", "unknown source 'nope': register it with `ragsync sources add` first"),
    ("admit", "invalid_event", "outside"),
]
KAFKA_RECORDS = Path(__file__).parent / "fixtures" / "bus" / "kafka_records.jsonl"


def write_notes(folder: Path) -> None:
    """The source's folder with its three notes."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in NOTES.items():
        (folder / name).write_text(text)


def event_bodies() -> list[bytes]:
    """The message bodies every bus test sends (module docstring)."""

    def upsert(name: str, **extra: Any) -> bytes:
        event = {
            "source_id": SOURCE,
            "doc_id": name,
            "op": "upsert",
            "source_version": 1,
            "content_uri": name,
            "event_time": 1796119200,
        }
        return json.dumps({**event, **extra}, sort_keys=True).encode()

    return [
        *(upsert(name) for name in NOTES),
        b"{not json",
        upsert("harbour.md", source_id="nope"),
        upsert("outside.md", content_uri="../outside.md"),
    ]


def kafka_records() -> list[tuple[bytes | None, bytes | None]]:
    """The recorded Kafka records ``(key, value)`` as ``ReadFromKafka``
    gives them (``tests/fixtures/bus/kafka_records.jsonl``: the bodies of
    :func:`event_bodies` keyed by document, then a tombstone)."""
    import base64

    out = []
    for line in KAFKA_RECORDS.read_text().splitlines():
        record = json.loads(line)
        key, value = record["key_b64"], record["value_b64"]
        out.append(
            (
                base64.b64decode(key) if key is not None else None,
                base64.b64decode(value) if value is not None else None,
            )
        )
    return out


def dead_letters(settings: Settings) -> list[tuple[str, str, str]]:
    """(stage, error class, message) of every open dead letter, sorted."""
    cat = open_catalog(settings)
    try:
        return sorted(
            (d.stage, d.error_class, d.message) for d in cat.dead_letters.list_dead_letters(limit=100)
        )
    finally:
        cat.close()


def assert_dead_as_expected(found: list[tuple[str, str, str]], expected: list[tuple[str, str, str]]) -> None:
    """Exactly the ``expected`` refusals, each with its reason (a part of its message)."""
    assert len(found) == len(expected), found
    for stage, error_class, reason in expected:
        assert any(s == stage and c == error_class and reason in m for s, c, m in found), (reason, found)


def readers_of_notes(settings: Settings) -> dict[str, list[str]]:
    """For each note, the groups (of ``staff`` and ``everyone``) whose query finds it."""
    found: dict[str, list[str]] = {}
    for name, text in QUERIES.items():
        for group in ("staff", "everyone"):
            hits = hybrid_query(settings, text, groups=[group], tenant_id=TENANT, k=3)
            if any(os.path.basename(h.uri) == name for h in hits):
                found.setdefault(name, []).append(group)
    return found
