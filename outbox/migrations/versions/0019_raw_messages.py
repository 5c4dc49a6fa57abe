"""submission: mails stored raw, as a client handed them over by SMTP

Revision ID: 0019
Revises: 0018

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Blob = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def upgrade():
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("raw_size", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("envelope_from", sa.String(998), nullable=True))
    op.create_table(
        "raw_chunks",
        sa.Column(
            "message_pk",
            Id,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("data", Blob, nullable=False),
    )


def downgrade():
    op.drop_table("raw_chunks")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("envelope_from")
        batch.drop_column("raw_size")
