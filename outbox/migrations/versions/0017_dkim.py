"""dkim: the signing keys of each domain

Revision ID: 0017
Revises: 0016

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "dkim_keys",
        sa.Column("id", Id, primary_key=True),
        sa.Column("domain", sa.String(253), nullable=False),
        sa.Column("selector", sa.String(63), nullable=False),
        sa.Column("algorithm", sa.String(16), nullable=False),
        sa.Column("private_key", sa.Text(), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.UniqueConstraint("domain", "selector", name="uq_dkim_keys_selector"),
    )


def downgrade() -> None:
    op.drop_table("dkim_keys")
