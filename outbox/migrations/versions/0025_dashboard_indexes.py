"""dashboard indexes: the latency tile and the oldest waiting message, each from one index

Revision ID: 0025
Revises: 0024

"""

from alembic import op

# revision identifiers, used by Alembic.
revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade():
    # status, created_at and sent_at beside settled_at: the latency tile reads an index
    # range, not a row per message sent in the last hour. The purge's range scans lead
    # with settled_at as before.
    op.drop_index("ix_messages_settled", table_name="messages")
    op.create_index(
        "ix_messages_settled", "messages", ["settled_at", "status", "created_at", "sent_at"]
    )
    # The oldest waiting message: one seek per status, not every waiting message's entry
    # in ix_messages_claim.
    op.create_index("ix_messages_due", "messages", ["status", "next_attempt_at"])


def downgrade():
    op.drop_index("ix_messages_due", table_name="messages")
    op.drop_index("ix_messages_settled", table_name="messages")
    op.create_index("ix_messages_settled", "messages", ["settled_at"])
