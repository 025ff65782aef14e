"""The names people show (`people`: Telegram user id -> display name), kept where every instance of a fleet
reads them, so each draws the same approval card.

Expand only (a new table): a process of the version before neither reads nor writes it, so the two run side by
side during a rolling deploy.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "people",
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("seen", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_people"),
    )


def downgrade() -> None:
    op.drop_table("people")
