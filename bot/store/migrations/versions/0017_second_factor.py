"""A second factor for approvals: the approvers' sealed TOTP secrets (`second_factors`), what a request asks
for (`approvals.second_factor`) and how each vote was given (`approval_votes.factor`).

Expand only (a new table, new nullable columns): a process of the version before neither reads nor writes
them (its requests need a tap, its votes read as taps), so the two run side by side during a rolling deploy.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "second_factors",
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("secret", sa.Text),
        sa.Column("pending", sa.Text),
        sa.Column("enrolled_at", sa.String(32)),
        sa.Column("last_step", sa.BigInteger, nullable=False),
        sa.Column("recovery", sa.Text, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("locked_until", sa.Float, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_second_factors"),
    )
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("second_factor", sa.String(16)))
    with op.batch_alter_table("approval_votes") as batch:
        batch.add_column(sa.Column("factor", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("approval_votes") as batch:
        batch.drop_column("factor")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("second_factor")
    op.drop_table("second_factors")
