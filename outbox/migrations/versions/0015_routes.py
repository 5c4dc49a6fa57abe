"""routes: the route each attempt went through, and each route's health

Revision ID: 0015
Revises: 0014

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Key = sa.String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("attempts", sa.Column("route", sa.String(64), nullable=True))
    op.create_table(
        "route_health",
        sa.Column("name", Key, nullable=False),
        sa.Column("ok_at", Timestamp, nullable=True),
        sa.Column("fault_at", Timestamp, nullable=True),
        sa.Column("fault", sa.Text(), nullable=True),
        sa.Column("faults", sa.Integer(), nullable=False),
        sa.Column("failing_since", Timestamp, nullable=True),
        sa.Column("noted_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("route_health")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("route")
