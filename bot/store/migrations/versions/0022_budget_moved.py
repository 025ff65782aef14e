"""The fleet's Telegram budget remembers how far its places were moved back for late sends
(`telegram_budget.moved`), so that a delay every instance saw moves them once, not once per instance.

Expand only (a new column with a default): a process of the version before neither reads nor writes it (its
bookings move nothing back), so the two run side by side during a rolling deploy.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "telegram_budget", sa.Column("moved", sa.Float, nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    op.drop_column("telegram_budget", "moved")
