"""The audit chain's seal (which key chains it) and its signed checkpoints.

The rows themselves are re-sealed (re-chained with HMAC-SHA-256) by the store the first time it opens with
a key (`bot.store.audit_seal.reseal`), which writes an `audit_resealed` row saying so.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_seal",
        sa.Column("public_key", sa.String(64), nullable=False),
        sa.Column("sealed_at", sa.String(32), nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("public_key", name="pk_audit_seal"),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("count", sa.BigInteger, nullable=False),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("at", sa.String(32), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("sig", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("count", "key", name="pk_audit_checkpoints"),
    )


def downgrade() -> None:
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_seal")
