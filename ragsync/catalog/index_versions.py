"""The index-version registry (table ``index_versions``).

One row per index version: the physical vector collection and keyword
directory built for one embedding model (``ragsync.index.versions`` owns the
states and the stores; this module only reads and writes the rows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository

_UPDATABLE = frozenset({"state", "note", "flipped_at", "retire_after"})


@dataclass(frozen=True)
class IndexVersion:
    """One row of ``index_versions``.

    Attributes:
        version: 1, 2, ...
        model_name: registry name of the embedding model (``get_model``).
        model_version: the model's cache-key version.
        dim: vector dimension.
        vector_collection: physical Milvus collection.
        keyword_index: the physical keyword index, named by its backend
            (``ragsync.index.backends``: a tantivy directory under ``home``,
            a Milvus collection, an Elasticsearch index).
        state: building | live | retired | refused | dropped.
        created_at, flipped_at, retire_after: epoch seconds (``flipped_at``:
            when it last became live; ``retire_after``: when gc may drop it).
        note: JSON gate report or a refusal reason.
    """

    version: int
    model_name: str
    model_version: str
    dim: int
    vector_collection: str
    keyword_index: str
    state: str
    created_at: float
    flipped_at: float | None
    retire_after: float | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class IndexVersionsRepository(Repository):
    """Rows of the index-version registry."""

    def list_index_versions(self) -> list[IndexVersion]:
        """Every registered version, oldest first."""
        t = schema.index_versions
        with self._read_engine.connect() as conn:
            return [IndexVersion(**dict(r)) for r in conn.execute(select(t).order_by(t.c.version)).mappings()]

    def has_index_versions(self) -> bool:
        """Whether any version is registered."""
        t = schema.index_versions
        with self._read_engine.connect() as conn:
            return bool(conn.execute(select(func.count()).select_from(t)).scalar_one())

    def add_index_version(self, version: IndexVersion, *, only_if_empty: bool = False) -> bool:
        """Register a version.

        Args:
            version: the row.
            only_if_empty: register it only when no version is registered yet
                (checked in the same transaction; how version 1 is recorded).

        Returns:
            True when the row was inserted.

        Raises:
            sqlalchemy.exc.IntegrityError: the version number is taken.
        """
        t = schema.index_versions
        with self._engine.begin() as conn:
            if only_if_empty and conn.execute(select(func.count()).select_from(t)).scalar_one():
                return False
            conn.execute(t.insert().values(**version.to_dict()))
        return True

    def update_index_version(self, version: int, **values: Any) -> bool:
        """Change a version's ``state``, ``note``, ``flipped_at`` or ``retire_after``.

        Returns:
            True when the version exists.

        Raises:
            ValueError: another column was named.
        """
        unknown = set(values) - _UPDATABLE
        if unknown:
            raise ValueError(f"index_versions columns that cannot be updated: {sorted(unknown)}")
        t = schema.index_versions
        with self._engine.begin() as conn:
            return conn.execute(update(t).where(t.c.version == version).values(**values)).rowcount == 1
