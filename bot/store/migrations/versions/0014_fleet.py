"""The fleet's partitions: who owns which users (`fleet_partitions`, `fleet_instances`), and updates waiting in
the webhook's inbox for their partition's owner (`updates_seen` gains `payload`, `partition`, `handled`).

Expand only (new tables, nullable columns): a process of the version before neither reads nor writes them, and
its inbox rows (null `handled`) read as handled, so the two run side by side during a rolling deploy.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_partitions",
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("owner", sa.String(36)),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("heartbeat", sa.Float),
        sa.PrimaryKeyConstraint("bot_id", "partition", name="pk_fleet_partitions"),
    )
    op.create_table(
        "fleet_instances",
        sa.Column("bot_id", sa.BigInteger, nullable=False),
        sa.Column("instance", sa.String(36), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("heartbeat", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("bot_id", "instance", name="pk_fleet_instances"),
    )
    with op.batch_alter_table("updates_seen") as batch:
        batch.add_column(sa.Column("payload", sa.Text))
        batch.add_column(sa.Column("partition", sa.Integer))
        batch.add_column(sa.Column("handled", sa.Boolean))
    op.create_index("ix_updates_seen_partition", "updates_seen", ["bot_id", "partition", "handled"])


def downgrade() -> None:
    op.drop_index("ix_updates_seen_partition", "updates_seen")
    with op.batch_alter_table("updates_seen") as batch:
        batch.drop_column("handled")
        batch.drop_column("partition")
        batch.drop_column("payload")
    op.drop_table("fleet_instances")
    op.drop_table("fleet_partitions")
