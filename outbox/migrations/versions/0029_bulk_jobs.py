"""bulk_jobs: a resend or cancel over every message a filter finds, done by workers

Revision ID: 0029
Revises: 0028

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "bulk_jobs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("move", sa.String(16), nullable=False),
        sa.Column("filter", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("ceiling", sa.BigInteger(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=True),
        sa.Column("moved", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("asked_by", sa.String(255), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("started_at", Timestamp, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("worker_id", sa.String(255), nullable=True),
        sa.Column("lease_until", Timestamp, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
    )
    op.create_index("ix_bulk_jobs_state", "bulk_jobs", ["state", "id"])


def downgrade() -> None:
    op.drop_index("ix_bulk_jobs_state", table_name="bulk_jobs")
    op.drop_table("bulk_jobs")
