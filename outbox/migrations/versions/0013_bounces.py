"""bounces: the bounce mails, raw, and what reading them found

Revision ID: 0013
Revises: 0012

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Blob = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def upgrade():
    op.create_table(
        "bounce_mails",
        sa.Column("id", Id, primary_key=True),
        sa.Column("received_at", Timestamp, nullable=False),
        sa.Column("via", sa.String(8), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("envelope_from", sa.String(998), nullable=True),
        sa.Column("envelope_to", sa.Text(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("raw", Blob, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(998), nullable=False),
        sa.Column("from_header", sa.String(998), nullable=False),
        sa.Column("message_pk", sa.BigInteger(), nullable=True),
        sa.Column("matched_by", sa.String(16), nullable=True),
        sa.Column("recipient", sa.String(998), nullable=True),
        sa.Column("status", sa.String(16), nullable=True),
        sa.Column("diagnostic", sa.Text(), nullable=True),
        sa.Column("results", sa.JSON(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("processed_at", Timestamp, nullable=True),
    )
    op.create_index("ix_bounce_mails_kind", "bounce_mails", ["kind", "id"])
    op.create_index("ix_bounce_mails_message", "bounce_mails", ["message_pk", "id"])
    op.create_index("ix_bounce_mails_received", "bounce_mails", ["received_at"])


def downgrade():
    op.drop_table("bounce_mails")
