"""Open questions that outlive the process (`rounds`), and the audit log's index by server.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_server", "audit", ["server"])
    op.create_table(
        "rounds",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("card_chat_id", sa.BigInteger),
        sa.Column("card_message_id", sa.BigInteger),
        sa.Column("era", sa.String(16), nullable=False),
        sa.Column("progress", sa.Text, nullable=False),
        sa.Column("input_requests", sa.Text),
        sa.Column("request_state", sa.Text),
        sa.Column("deadline", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rounds"),
    )


def downgrade() -> None:
    op.drop_table("rounds")
    op.drop_index("ix_audit_server", "audit")
