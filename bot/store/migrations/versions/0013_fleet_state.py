"""What a fleet's instances share besides the questions: Mini App launches and answers on their way to the
instance holding the prompt (`miniapp_launches`, `miniapp_answers`), OAuth sign-ins waiting for their browser
(`oauth_pending`), and `/tools` lists (`tool_lists`); and an index to find a kept question by its card's token.

Expand only (new tables, a new index): a process of the version before neither reads nor writes them, so the
two run side by side during a rolling deploy.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_rounds_token", "rounds", ["token"])
    op.create_table(
        "miniapp_launches",
        sa.Column("launch", sa.String(64), nullable=False),
        sa.Column("used", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("launch", name="pk_miniapp_launches"),
    )
    op.create_index("ix_miniapp_launches_expires", "miniapp_launches", ["expires"])
    op.create_table(
        "miniapp_answers",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("token", sa.String(32), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_miniapp_answers"),
    )
    op.create_index("ix_miniapp_answers_created", "miniapp_answers", ["created"])
    op.create_table(
        "oauth_pending",
        sa.Column("state", sa.String(64), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("params", sa.Text),
        sa.Column("reason", sa.Text),
        sa.PrimaryKeyConstraint("state", name="pk_oauth_pending"),
    )
    op.create_index("ix_oauth_pending_expires", "oauth_pending", ["expires"])
    op.create_table(
        "tool_lists",
        sa.Column("token", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("tools", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("token", name="pk_tool_lists"),
    )
    op.create_index("ix_tool_lists_created", "tool_lists", ["created"])


def downgrade() -> None:
    op.drop_table("tool_lists")
    op.drop_table("oauth_pending")
    op.drop_table("miniapp_answers")
    op.drop_table("miniapp_launches")
    op.drop_index("ix_rounds_token", "rounds")
