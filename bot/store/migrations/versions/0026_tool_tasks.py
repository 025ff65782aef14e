"""Tool calls made as tasks, kept until their result reached their person: polled again after a restart.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_tasks",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(256), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float),
    )


def downgrade() -> None:
    op.drop_table("tool_tasks")
