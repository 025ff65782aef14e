"""Per-person OAuth sign-ins (`oauth_accounts`): tokens and client registrations, sealed with the secret key.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oauth_accounts",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("issuer", sa.String(512)),
        sa.Column("tokens", sa.Text),
        sa.Column("client", sa.Text),
        sa.Column("expires_at", sa.Float),
        sa.Column("updated_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_oauth_accounts"),
        sa.UniqueConstraint("user_id", "server", name="uq_oauth_accounts_user_id_server"),
    )


def downgrade() -> None:
    op.drop_table("oauth_accounts")
