"""The webhook's inbox (`updates_seen`): each delivered update's id, committed before Telegram gets its 200.

Expand only (a new table): a process of the version before neither reads nor writes it, so the two run side
by side during a rolling deploy (the old one handles a redelivery as before).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "updates_seen",
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("update_id", sa.BigInteger, nullable=False),
        sa.Column("received", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("bot_id", "update_id", name="pk_updates_seen"),
    )
    op.create_index("ix_updates_seen_received", "updates_seen", ["received"])


def downgrade() -> None:
    op.drop_table("updates_seen")
