"""Who carried out an approval's decision: a nullable `ran_by` on approval requests, so that an approved call runs
exactly once in a fleet (issue 32).

The deciding transaction sets it to "due"; whoever then carries the decision out (runs the approved call, or
tells the requester) sets it from "due" to its own name, by one compare-and-set: a waiter woken on one instance
and the requester's owner on another cannot both run the call.

Expand only (a nullable column, nothing rewritten): a process of the version before neither reads nor writes it,
so the two run side by side during a rolling deploy. Rows decided before, or by it, stay null and are never
claimed (the version that decided them carried them out, as it always did).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("ran_by", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("ran_by")
