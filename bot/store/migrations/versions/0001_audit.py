"""The audit log: one hash-chained row per event.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("at", sa.String(32), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("user_id", sa.BigInteger),
        sa.Column("chat_id", sa.BigInteger),
        sa.Column("server", sa.String(64)),
        sa.Column("tool", sa.String(256)),
        sa.Column("request_id", sa.String(64)),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit"),
        sa.UniqueConstraint("seq", name="uq_audit_seq"),
    )
    op.create_index("ix_audit_user_id", "audit", ["user_id"])


def downgrade() -> None:
    op.drop_table("audit")
