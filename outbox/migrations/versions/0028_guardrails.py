"""guardrails: outcomes per hour, sending domain and stream; domains whose broadcast is paused

Revision ID: 0028
Revises: 0027

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "guardrail_hours",
        sa.Column("hour_at", Timestamp, primary_key=True),
        sa.Column("domain", sa.String(253), primary_key=True),
        sa.Column("stream", sa.String(16), primary_key=True),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("refused", sa.Integer(), nullable=False),
        sa.Column("bounced", sa.Integer(), nullable=False),
        sa.Column("complained", sa.Integer(), nullable=False),
    )
    op.create_table(
        "domain_pauses",
        sa.Column("domain", sa.String(253), primary_key=True),
        sa.Column("paused_at", Timestamp, nullable=True),
        sa.Column("stream", sa.String(16), nullable=True),
        sa.Column("kind", sa.String(16), nullable=True),
        sa.Column("span", sa.String(8), nullable=True),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("recipients", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("resumed_at", Timestamp, nullable=True),
        sa.Column("resumed_by", sa.String(255), nullable=True),
        sa.Column("counts_from", Timestamp, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("domain_pauses")
    op.drop_table("guardrail_hours")
