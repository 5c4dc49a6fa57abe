"""stream_hours: messages sent and failed, and their queue-to-250, per settled hour and stream

Revision ID: 0030
Revises: 0029

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "stream_hours",
        sa.Column("hour_at", Timestamp, primary_key=True),
        sa.Column("stream", sa.String(16), primary_key=True),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("p50_ms", sa.Integer(), nullable=True),
        sa.Column("p95_ms", sa.Integer(), nullable=True),
        sa.Column("counted_at", Timestamp, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("stream_hours")
