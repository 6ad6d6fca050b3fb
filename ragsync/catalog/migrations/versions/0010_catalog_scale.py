"""A catalog of millions: the indexes its reads need and exact document tallies.

* ``ix_documents_source_doc`` (source_id, tenant_id, doc_id): a full
  listing's diff (``iter_source_documents``) reads a source in doc_id pages;
  with only ``ix_documents_source`` each page sorted the whole source.
* ``ix_dead_letters_doc`` (doc_id, resolved_at): the unchanged re-run's skip
  check counts each listed document's open dead letters; without it every
  document scanned the whole dead-letter table.
* ``ix_parsed_docs_review`` (partial: parses with pages for review) and
  ``ix_documents_content`` (content_hash): ``pages_for_review`` (status and
  every /metrics scrape) read every document to find the few parses with
  pages for review.
* ``document_tallies``: documents counted by (tenant, source, status, error
  class), filled from ``documents`` here and kept exact by triggers in each
  writer's transaction (insert, delete, and an update that changes one of the
  four columns). Status, coverage and /metrics read it instead of counting
  every document on each call.

Downgrade drops the triggers, the table and the indexes.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0010", "0009"

_KEY = ("tenant_id", "source_id", "status", "error_class")
_CHANGED = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _KEY)

# SQLite: insert a zero row when missing, then add. Not INSERT OR IGNORE: an
# outer upsert's conflict policy overrides the trigger's (record_fetch's
# ON CONFLICT DO UPDATE would then fail on an existing tally row).
_SQLITE = [
    f"""CREATE TRIGGER tr_document_tallies_{name} AFTER {event} ON documents {when}
BEGIN
{body}
END"""
    for name, event, when, body in (
        ("insert", "INSERT", "", "{add}"),
        ("delete", "DELETE", "", "{sub}"),
        ("update", "UPDATE OF tenant_id, source_id, status, error_class", f"WHEN {_CHANGED}", "{sub}\n{add}"),
    )
]
_SQLITE_ADD = """INSERT INTO document_tallies (tenant_id, source_id, status, error_class, n)
  SELECT NEW.tenant_id, NEW.source_id, NEW.status, COALESCE(NEW.error_class, ''), 0
  WHERE NOT EXISTS (SELECT 1 FROM document_tallies WHERE tenant_id = NEW.tenant_id
    AND source_id = NEW.source_id AND status = NEW.status AND error_class = COALESCE(NEW.error_class, ''));
UPDATE document_tallies SET n = n + 1 WHERE tenant_id = NEW.tenant_id AND source_id = NEW.source_id
  AND status = NEW.status AND error_class = COALESCE(NEW.error_class, '');"""
_SQLITE_SUB = """UPDATE document_tallies SET n = n - 1
  WHERE tenant_id = OLD.tenant_id AND source_id = OLD.source_id
  AND status = OLD.status AND error_class = COALESCE(OLD.error_class, '');"""

_POSTGRES = [
    """CREATE FUNCTION document_tallies_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE document_tallies SET n = n - 1
     WHERE tenant_id = OLD.tenant_id AND source_id = OLD.source_id
       AND status = OLD.status AND error_class = COALESCE(OLD.error_class, '');
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    INSERT INTO document_tallies (tenant_id, source_id, status, error_class, n)
    VALUES (NEW.tenant_id, NEW.source_id, NEW.status, COALESCE(NEW.error_class, ''), 1)
    ON CONFLICT (tenant_id, source_id, status, error_class)
    DO UPDATE SET n = document_tallies.n + 1;
  END IF;
  RETURN NULL;
END $$""",
    """CREATE TRIGGER tr_document_tallies_insert_delete AFTER INSERT OR DELETE ON documents
FOR EACH ROW EXECUTE FUNCTION document_tallies_apply()""",
    f"""CREATE TRIGGER tr_document_tallies_update
AFTER UPDATE OF tenant_id, source_id, status, error_class ON documents
FOR EACH ROW WHEN ({_CHANGED.replace(" IS NOT ", " IS DISTINCT FROM ")})
EXECUTE FUNCTION document_tallies_apply()""",
]


def upgrade() -> None:
    op.create_index("ix_documents_source_doc", "documents", ["source_id", "tenant_id", "doc_id"])
    op.create_index("ix_dead_letters_doc", "dead_letters", ["doc_id", "resolved_at"])
    op.create_index("ix_documents_content", "documents", ["content_hash"])
    review = sa.text("pages_for_review != '[]'")
    op.create_index(
        "ix_parsed_docs_review", "parsed_docs", ["content_hash"], sqlite_where=review, postgresql_where=review
    )
    op.create_table(
        "document_tallies",
        sa.Column("tenant_id", sa.String(255), primary_key=True),
        sa.Column("source_id", sa.String(255), primary_key=True),
        sa.Column("status", sa.String(32), primary_key=True),
        sa.Column("error_class", sa.String(64), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    op.execute(
        sa.text(
            "INSERT INTO document_tallies (tenant_id, source_id, status, error_class, n) "
            "SELECT tenant_id, source_id, status, COALESCE(error_class, ''), COUNT(*) FROM documents "
            "GROUP BY tenant_id, source_id, status, COALESCE(error_class, '')"
        )
    )
    if op.get_bind().dialect.name == "postgresql":
        statements = _POSTGRES
    else:
        statements = [s.format(add=_SQLITE_ADD, sub=_SQLITE_SUB) for s in _SQLITE]
    for statement in statements:
        op.execute(sa.text(statement))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text("DROP TRIGGER tr_document_tallies_insert_delete ON documents"))
        op.execute(sa.text("DROP TRIGGER tr_document_tallies_update ON documents"))
        op.execute(sa.text("DROP FUNCTION document_tallies_apply()"))
    else:
        for name in ("insert", "delete", "update"):
            op.execute(sa.text(f"DROP TRIGGER tr_document_tallies_{name}"))
    op.drop_table("document_tallies")
    op.drop_index("ix_parsed_docs_review", "parsed_docs")
    op.drop_index("ix_documents_content", "documents")
    op.drop_index("ix_dead_letters_doc", "dead_letters")
    op.drop_index("ix_documents_source_doc", "documents")
