"""hourly rollup of sent and failed attempts for the dashboard's chart

Revision ID: 0003
Revises: 0002

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade():
    op.create_table(
        "attempt_hours",
        sa.Column("hour_at", Timestamp, nullable=False),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("counted_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("hour_at"),
    )


def downgrade():
    op.drop_table("attempt_hours")
