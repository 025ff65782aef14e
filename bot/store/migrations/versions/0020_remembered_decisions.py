"""Remembered decisions (`remembered_decisions`): a person's answer to their agent's permission prompt, kept for
the agent's session, an hour or always, so that every process of the fleet answers the same ask the same way
without a card, and `/agents` lists and revokes them.

Expand only (a new table): a process of the version before neither reads nor writes it, so the two run side by
side during a rolling deploy.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "remembered_decisions",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.Integer, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("input_hash", sa.String(64), nullable=False),
        sa.Column("allow", sa.Boolean, nullable=False),
        sa.Column("span", sa.String(16), nullable=False),
        sa.Column("session", sa.Text, nullable=False),
        sa.Column("made_at", sa.String(32), nullable=False),
        sa.Column("made_by", sa.BigInteger),
        sa.Column("until", sa.String(32)),
        sa.Column("forgotten", sa.String(32)),
        sa.PrimaryKeyConstraint("id", name="pk_remembered_decisions"),
    )
    op.create_index("ix_remembered_decisions_user_id", "remembered_decisions", ["user_id", "agent_id"])


def downgrade() -> None:
    op.drop_table("remembered_decisions")
