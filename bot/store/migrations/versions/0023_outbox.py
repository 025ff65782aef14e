"""The outbox (`outbox`): every message that must reach a person (a call's result, the edit that settles a card,
an approval's outcome), written before it waits for its turn under Telegram's limits and deleted once Telegram
answered, so that the process that owns the person next (after a kill, or the same bot started again) sends what
was not.

Expand only (a new table): a process of the version before neither reads nor writes it (its messages are not
kept, as before), so the two run side by side during a rolling deploy.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("instance", sa.String(36), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("written", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("instance", "seq", name="pk_outbox"),
    )
    op.create_index("ix_outbox_bot_id", "outbox", ["bot_id", "partition"])


def downgrade() -> None:
    op.drop_index("ix_outbox_bot_id", table_name="outbox")
    op.drop_table("outbox")
