"""The fleet's Telegram budget (`telegram_budget`): a row per bucket (overall, each group) shared by every
instance on PostgreSQL, and the overall row's "paused until" after a 429.

Expand only (a new table): a process of the version before neither reads nor writes it, so the two run side
by side during a rolling deploy (the old one keeps to its own buckets). On SQLite the table stays empty.

Revision ID: 0011
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telegram_budget",
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("bucket", sa.String(64), nullable=False),
        sa.Column("tat", sa.Float, nullable=False),
        sa.Column("paused_until", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("bot_id", "bucket", name="pk_telegram_budget"),
    )


def downgrade() -> None:
    op.drop_table("telegram_budget")
