"""streams: each message is transactional or broadcast, and claims take them in that order

Revision ID: 0024
Revises: 0023

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

CLAIM_BEFORE = ["status", sa.literal_column("priority DESC"), "next_attempt_at", "id"]


def upgrade():
    # The index outside the batch: SQLite's copy of the table cannot make an index on an
    # expression (priority DESC).
    op.drop_index("ix_messages_claim", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.add_column(
            sa.Column("stream", sa.String(16), nullable=False, server_default="transactional")
        )
    op.create_index(
        "ix_messages_claim", "messages", [*CLAIM_BEFORE[:1], "stream", *CLAIM_BEFORE[1:]]
    )


def downgrade():
    op.drop_index("ix_messages_claim", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("stream")
    op.create_index("ix_messages_claim", "messages", CLAIM_BEFORE)
