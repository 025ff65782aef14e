"""The gateway as its own OAuth authorization server: registered (and fetched) clients, consent requests on
their way from the browser to the phone and back, and the access and refresh tokens issued (as hashes).

Expand only (new tables): a process of the version before neither reads nor writes them (it serves no OAuth),
so the two run side by side during a rolling deploy.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oauth_clients",
        sa.Column("client_id", sa.String(512), nullable=False),
        sa.Column("info", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("client_id", name="pk_oauth_clients"),
    )
    op.create_table(
        "oauth_consents",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("page_hash", sa.String(64), nullable=False),
        sa.Column("link_hash", sa.String(64), nullable=False),
        sa.Column("code_hash", sa.String(64)),
        sa.Column("client_id", sa.String(512), nullable=False),
        sa.Column("client_name", sa.String(200), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("match", sa.String(8), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger),
        sa.Column("grant_id", sa.Integer),
        sa.Column("expires", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_oauth_consents"),
        sa.UniqueConstraint("page_hash", name="uq_oauth_consents_page_hash"),
        sa.UniqueConstraint("link_hash", name="uq_oauth_consents_link_hash"),
        sa.UniqueConstraint("code_hash", name="uq_oauth_consents_code_hash"),
    )
    op.create_index("ix_oauth_consents_expires", "oauth_consents", ["expires"])
    op.create_table(
        "oauth_tokens",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("grant_id", sa.Integer, nullable=False),
        sa.Column("client_id", sa.String(512), nullable=False),
        sa.Column("resource", sa.String(512), nullable=False),
        sa.Column("expires", sa.Float),
        sa.Column("rotated", sa.Float),
        sa.PrimaryKeyConstraint("token_hash", name="pk_oauth_tokens"),
    )
    op.create_index("ix_oauth_tokens_grant_id", "oauth_tokens", ["grant_id"])


def downgrade() -> None:
    op.drop_index("ix_oauth_tokens_grant_id", table_name="oauth_tokens")
    op.drop_table("oauth_tokens")
    op.drop_index("ix_oauth_consents_expires", table_name="oauth_consents")
    op.drop_table("oauth_consents")
    op.drop_table("oauth_clients")
