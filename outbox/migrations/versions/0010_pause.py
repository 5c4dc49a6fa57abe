"""the pause: one row while sending is paused, saying who paused it, when and why

Revision ID: 0010
Revises: 0009

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade():
    op.create_table(
        "pause",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("paused_at", Timestamp, nullable=False),
        sa.Column("paused_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade():
    op.drop_table("pause")
