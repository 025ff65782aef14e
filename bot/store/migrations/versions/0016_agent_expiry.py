"""When an agent token's expiry was first noticed: a nullable `expiry_noted` on `agent_tokens`, so that the audit
row saying a token expired is written once, by whichever process first refuses it (or finds it expired while its
agent is busy), and never again after a restart.

Expand only (a nullable column, nothing rewritten): a process of the version before neither reads nor writes it,
so the two run side by side during a rolling deploy.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_tokens") as batch:
        batch.add_column(sa.Column("expiry_noted", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("agent_tokens") as batch:
        batch.drop_column("expiry_noted")
