"""submission: one Message-ID for the parts of a mail a relay hands over in several transactions

Revision ID: 0022
Revises: 0021

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# SQLite's is unnamed: batch mode names it by this to drop it.
NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _unique_name() -> str:
    for found in sa.inspect(op.get_bind()).get_unique_constraints("messages"):
        if found["column_names"] == ["message_id"]:
            return found["name"] or "uq_messages_message_id"
    raise RuntimeError("messages has no unique constraint on message_id to drop")


def upgrade():
    name = _unique_name()
    with op.batch_alter_table("messages", naming_convention=NAMING) as batch:
        batch.drop_constraint(name, type_="unique")
        batch.create_index("ix_messages_message_id", ["message_id"])


def downgrade():
    shared = op.get_bind().scalar(
        sa.text(
            "SELECT COUNT(*) FROM (SELECT message_id FROM messages"
            " GROUP BY message_id HAVING COUNT(*) > 1) AS shared"
        )
    )
    if shared:
        raise RuntimeError(
            f"messages holds {shared} Message-ID(s) shared by several rows (the parts of a "
            "mail handed over in several SMTP transactions); revision 0021 holds each "
            "Message-ID once: delete those rows first"
        )
    with op.batch_alter_table("messages", naming_convention=NAMING) as batch:
        batch.drop_index("ix_messages_message_id")
        batch.create_unique_constraint("uq_messages_message_id", ["message_id"])
