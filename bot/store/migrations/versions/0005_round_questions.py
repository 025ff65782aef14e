"""Open questions kept per question of a round: its round, its input-request key, its card token, its answer.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("round_id", sa.String(36)))
        batch.add_column(sa.Column("input_key", sa.String(256)))
        batch.add_column(sa.Column("token", sa.String(32)))
        batch.add_column(sa.Column("answer", sa.Text))
    op.create_index("ix_rounds_round_id", "rounds", ["round_id"])


def downgrade() -> None:
    op.drop_index("ix_rounds_round_id", "rounds")
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("answer")
        batch.drop_column("token")
        batch.drop_column("input_key")
        batch.drop_column("round_id")
