"""captured: the mail the capture transport keeps instead of sending (OUTBOX_DELIVERY)

Revision ID: 0027
Revises: 0026

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "captured",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column(
            "message_pk",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
            nullable=False,
        ),
        sa.Column("sender", sa.String(998), nullable=False),
        sa.Column("recipients", sa.JSON(), nullable=False),
        sa.Column(
            "raw",
            sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb"),
            nullable=False,
        ),
    )
    op.create_index("ix_captured_message_pk", "captured", ["message_pk"])


def downgrade() -> None:
    op.drop_table("captured")  # its index with it: MariaDB keeps it for the foreign key
