"""messages per status, counted in full by a worker for the pages' counts past the cap

Revision ID: 0004
Revises: 0003

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade():
    op.create_table(
        "status_counts",
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("messages", sa.BigInteger(), nullable=False),
        sa.Column("counted_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("status"),
    )


def downgrade():
    op.drop_table("status_counts")
