"""retention: when a message settled, when its bodies were dropped, and the daily purge's turn

Revision ID: 0009
Revises: 0008

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade():
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("settled_at", Timestamp, nullable=True))
        batch.add_column(sa.Column("bodies_dropped_at", Timestamp, nullable=True))
    # Messages settled before this migration: their last attempt, or (cancelled before any
    # attempt) when they were made.
    op.execute(
        "UPDATE messages SET settled_at = COALESCE(last_retry, created_at) "
        "WHERE status IN ('sent', 'failed', 'cancelled')"
    )
    op.create_index("ix_messages_settled", "messages", ["settled_at"])
    op.create_index("ix_messages_bodies", "messages", ["bodies_dropped_at", "settled_at"])
    op.create_table(
        "retention_runs",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("last_run_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade():
    op.drop_table("retention_runs")
    op.drop_index("ix_messages_bodies", table_name="messages")
    op.drop_index("ix_messages_settled", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("bodies_dropped_at")
        batch.drop_column("settled_at")
