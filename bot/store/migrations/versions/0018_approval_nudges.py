"""Approval reminders and escalation: when a request reminds its approvers (`remind_at`, `reminded_at`) and
when more approvers join it (`escalate_at`, `escalate_to`, `escalated_at`), kept so a restart keeps the times.

Expand only (nullable columns): a process of the version before neither reads nor writes them, so the two run
side by side during a rolling deploy (the old one just does not remind or escalate).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("remind_at", sa.Float))
        batch.add_column(sa.Column("reminded_at", sa.String(32)))
        batch.add_column(sa.Column("escalate_at", sa.Float))
        batch.add_column(sa.Column("escalate_to", sa.Text))
        batch.add_column(sa.Column("escalated_at", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        for name in ("escalated_at", "escalate_to", "escalate_at", "reminded_at", "remind_at"):
            batch.drop_column(name)
