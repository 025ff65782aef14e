"""Approval requests (`approvals`) and the votes cast on them (`approval_votes`).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("gate", sa.String(16), nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("question", sa.Text),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("user_name", sa.String(256), nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("approvers", sa.Text, nullable=False),
        sa.Column("quorum", sa.Integer, nullable=False),
        sa.Column("self_approval", sa.Boolean, nullable=False),
        sa.Column("approval_chat", sa.BigInteger),
        sa.Column("cards", sa.Text, nullable=False),
        sa.Column("names", sa.Text, nullable=False),
        sa.Column("deadline", sa.Float, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("decided_at", sa.String(32)),
        sa.PrimaryKeyConstraint("id", name="pk_approvals"),
    )
    op.create_index("ix_approvals_status", "approvals", ["status"])
    op.create_table(
        "approval_votes",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("approval_id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("vote", sa.String(16), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_approval_votes"),
    )
    op.create_index("ix_approval_votes_approval_id", "approval_votes", ["approval_id"])


def downgrade() -> None:
    op.drop_table("approval_votes")
    op.drop_table("approvals")
