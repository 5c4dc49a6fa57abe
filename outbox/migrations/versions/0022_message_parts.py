"""submission: the parts of a mail handed over in several SMTP transactions, one Message-ID

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
        batch.add_column(sa.Column("part", sa.String(64), nullable=False, server_default=""))
        batch.drop_constraint(name, type_="unique")
        batch.create_unique_constraint("uq_messages_message_id_part", ["message_id", "part"])


def downgrade():
    parts = op.get_bind().scalar(sa.text("SELECT COUNT(*) FROM messages WHERE part <> ''"))
    if parts:
        raise RuntimeError(
            f"messages holds {parts} further part(s) of mails handed over in several SMTP "
            "transactions, each under a Message-ID another row has; revision 0021 holds "
            "each Message-ID once: delete those rows first"
        )
    with op.batch_alter_table("messages", naming_convention=NAMING) as batch:
        batch.drop_constraint("uq_messages_message_id_part", type_="unique")
        batch.create_unique_constraint("uq_messages_message_id", ["message_id"])
        batch.drop_column("part")
