"""webhooks: the endpoints apps registered and the deliveries of events to them

Revision ID: 0014
Revises: 0013

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Key = (
    sa.String(255)
    .with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mariadb")
    .with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql")
)
LongText = (
    sa.Text().with_variant(mysql.LONGTEXT(), "mariadb").with_variant(mysql.LONGTEXT(), "mysql")
)


def upgrade():
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("events", sa.String(255), nullable=False),
        sa.Column("secret", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_at", Timestamp, nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("event_id", Key, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", Timestamp, nullable=False),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("locked_at", Timestamp, nullable=True),
        sa.Column("last_attempt_at", Timestamp, nullable=True),
        sa.Column("response_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("response", sa.String(500), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_event"),
    )
    op.create_index(
        "ix_webhook_deliveries_claim",
        "webhook_deliveries",
        ["status", "next_attempt_at", "id"],
    )
    op.create_index("ix_webhook_deliveries_endpoint", "webhook_deliveries", ["endpoint_id", "id"])
    op.create_index("ix_webhook_deliveries_created", "webhook_deliveries", ["created_at"])


def downgrade():
    op.drop_index("ix_webhook_deliveries_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_endpoint", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_claim", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
