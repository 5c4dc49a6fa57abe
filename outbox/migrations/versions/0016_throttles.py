"""throttles: a token bucket per route and per recipient domain, shared by every worker

Revision ID: 0016
Revises: 0015

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)
BucketName = (
    sa.String(300)
    .with_variant(mysql.VARCHAR(300, collation="utf8mb4_bin"), "mariadb")
    .with_variant(mysql.VARCHAR(300, collation="utf8mb4_bin"), "mysql")
)


def upgrade() -> None:
    op.create_table(
        "throttles",
        sa.Column("name", BucketName, nullable=False),
        sa.Column("rate", sa.Double(), nullable=False),
        sa.Column("burst", sa.Double(), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("factor", sa.Double(), nullable=False),
        sa.Column("slowed_at", Timestamp, nullable=True),
        sa.Column("reason", sa.String(500), nullable=True),
        sa.Column("held_until", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("throttles")
