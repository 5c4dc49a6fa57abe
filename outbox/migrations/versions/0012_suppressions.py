"""suppressions: the suppression list

Revision ID: 0012
Revises: 0011

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
AddressKey = sa.String(320).with_variant(
    mysql.VARCHAR(320, collation="utf8mb4_bin"), "mysql", "mariadb"
)


def upgrade():
    op.create_table(
        "suppressions",
        sa.Column("id", Id, primary_key=True),
        sa.Column("address", sa.String(998), nullable=False),
        sa.Column("key", AddressKey, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=True),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("message_pk", sa.BigInteger(), nullable=True),
        sa.Column("bounce_pk", sa.BigInteger(), nullable=True),
        sa.UniqueConstraint("key"),
    )
    op.create_index("ix_suppressions_expires", "suppressions", ["expires_at"])


def downgrade():
    op.drop_table("suppressions")
