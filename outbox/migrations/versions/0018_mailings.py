"""mailings: one body for many recipients

Revision ID: 0018
Revises: 0017

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Key = sa.String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Blob = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def upgrade():
    op.create_table(
        "mailings",
        sa.Column("id", Id, primary_key=True),
        sa.Column("from_addr", sa.String(998), nullable=False),
        sa.Column("from_name", sa.String(998), nullable=False),
        sa.Column("reply_to", sa.String(998), nullable=True),
        sa.Column("reply_to_name", sa.String(998), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("text_body", LongText, nullable=True),
        sa.Column("html_body", LongText, nullable=True),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("send_after", Timestamp, nullable=True),
        sa.Column("unsubscribe_url", sa.String(2000), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("recipient_count", sa.Integer(), nullable=False),
        sa.Column("attachment_count", sa.Integer(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("source", Key, nullable=False),
        sa.Column("idempotency_key", Key, nullable=True),
        sa.UniqueConstraint("source", "idempotency_key", name="uq_mailings_idempotency"),
    )
    op.create_table(
        "mailing_attachments",
        sa.Column("id", Id, primary_key=True),
        sa.Column(
            "mailing_id",
            Id,
            sa.ForeignKey("mailings.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_mailing_attachments_mailing_id", "mailing_attachments", ["mailing_id"])
    op.create_table(
        "mailing_attachment_chunks",
        sa.Column(
            "attachment_id",
            Id,
            sa.ForeignKey("mailing_attachments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("data", Blob, nullable=False),
    )
    op.add_column("messages", sa.Column("mailing_id", sa.BigInteger(), nullable=True))
    op.add_column("messages", sa.Column("fields", sa.JSON(), nullable=True))
    op.create_index("ix_messages_mailing", "messages", ["mailing_id", "status"])


def downgrade():
    op.drop_index("ix_messages_mailing", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("fields")
        batch.drop_column("mailing_id")
    op.drop_table("mailing_attachment_chunks")
    op.drop_table("mailing_attachments")
    op.drop_table("mailings")
