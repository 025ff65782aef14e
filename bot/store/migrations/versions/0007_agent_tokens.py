"""Agent tokens (`agent_tokens`): what `/agents new` makes and the gateway checks, kept as SHA-256 hashes.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_tokens",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created", sa.String(32), nullable=False),
        sa.Column("expires", sa.String(32)),
        sa.Column("last_used", sa.String(32)),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("revoked", sa.String(32)),
        sa.PrimaryKeyConstraint("id", name="pk_agent_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_agent_tokens_token_hash"),
    )
    op.create_index("ix_agent_tokens_user_id", "agent_tokens", ["user_id"])


def downgrade() -> None:
    op.drop_table("agent_tokens")
