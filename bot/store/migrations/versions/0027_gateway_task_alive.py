"""When the process running a gateway task's call last said so: a nullable `alive` on `gateway_tasks`, so that a
task whose process ended mid-call (SIGKILL, SIGTERM, a takeover) is reported failed by the next process that reads
it instead of staying `working` until its time to live.

Expand only (a nullable column, nothing rewritten): a process of the version before neither reads nor writes it
(its tasks are never found stale), so the two run side by side during a rolling deploy.

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gateway_tasks") as batch:
        batch.add_column(sa.Column("alive", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("gateway_tasks") as batch:
        batch.drop_column("alive")
