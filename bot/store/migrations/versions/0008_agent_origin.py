"""Whose agent asked: a nullable `agent` (the token's name) on approval requests and kept questions.

Expand only (a nullable column each, nothing rewritten): a process of the version before ignores it, and reads
the rows it writes as the chat's (null), so the two run side by side during a rolling deploy.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("agent", sa.String(32)))
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("agent", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("agent")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("agent")
