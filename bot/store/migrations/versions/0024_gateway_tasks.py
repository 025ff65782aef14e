"""Agents' calls as tasks: the gateway's tasks (status, result, time to live, the token that may read them), and
on an approval request the task its agent's call runs as.

Expand only (a new table, a nullable column): a process of the version before neither reads nor writes them (its
agents' calls are never tasks), so the two run side by side during a rolling deploy.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_tasks",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent", sa.String(32), nullable=False),
        sa.Column("tool", sa.String(512), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text),
        sa.Column("result", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
        sa.Column("ttl_ms", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_gateway_tasks"),
    )
    op.create_index("ix_gateway_tasks_token_id", "gateway_tasks", ["token_id"])
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("task", sa.String(36)))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("task")
    op.drop_index("ix_gateway_tasks_token_id", table_name="gateway_tasks")
    op.drop_table("gateway_tasks")
