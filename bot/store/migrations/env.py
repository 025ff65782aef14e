"""Alembic's environment: runs the migrations on the connection `bot.store.engine.upgrade` hands over. Does I/O.

There is no alembic.ini: the store builds the Alembic config in code, so `toolnexus-bot db upgrade` and the
automatic upgrade at start are the only ways in.
"""

from __future__ import annotations

from alembic import context

from bot.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the migrations with `toolnexus-bot db upgrade --config PATH`")
# SQLite cannot alter most constraints in place; batch mode copies the table instead.
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
