"""Alembic environment of the catalog (run by ``alembic`` and by :func:`ragsync.catalog.migrations.migrate`).

``migrate`` passes an open connection, inside its own transaction, in
``config.attributes["connection"]``; Alembic then neither begins nor commits
(the caller's transaction holds the migration lock and the legacy stamp too).
Run from the ``alembic`` command line, the database comes from ``-x url=...``
(or ``sqlalchemy.url`` in ``alembic.ini``) and Alembic owns the transaction.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from ragsync.catalog import schema
from ragsync.catalog.base import create_catalog_engine

config = context.config


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=schema.metadata,
        compare_type=True,
        on_version_apply=config.attributes.get("on_version_apply"),
        **kwargs,
    )


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("give the catalog: alembic -x url=sqlite:///path/catalog.db ...")
    return url


def _run(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place: autogenerate renders batch
    # operations (copy, alter, rename) for it.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif config.attributes.get("connection") is not None:
    _run(config.attributes["connection"])
else:
    engine = create_catalog_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()
