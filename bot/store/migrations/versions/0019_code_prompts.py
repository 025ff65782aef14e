"""The approval a code prompt asks about (`code_prompts`): which request (and content) an approver's next code
approves, kept in the database so a code sent after a restart, or to another process of the fleet, still counts.

Expand only (a new table): a process of the version before neither reads nor writes it (it keeps the prompt in
its memory as before), so the two run side by side during a rolling deploy.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "code_prompts",
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("approval_id", sa.String(36), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("card_chat", sa.BigInteger),
        sa.Column("card_message", sa.BigInteger),
        sa.Column("message_id", sa.BigInteger),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_code_prompts"),
    )


def downgrade() -> None:
    op.drop_table("code_prompts")
