"""Agents' calls on their way to their person's owner (`agent_calls`): the gateway's instance that received an
agent's request hands the call to the instance that owns its person, which runs it and writes the result back.

Expand only (a new table): a process of the version before neither reads nor writes it (it runs an agent's call
where the request landed, as before), so the two run side by side during a rolling deploy.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_calls",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("agent", sa.String(32), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("receiver", sa.String(36), nullable=False),
        sa.Column("runner", sa.String(36)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("left_as", sa.String(32)),
        sa.Column("result", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_agent_calls"),
    )
    op.create_index("ix_agent_calls_state", "agent_calls", ["bot_id", "state"])


def downgrade() -> None:
    op.drop_table("agent_calls")
