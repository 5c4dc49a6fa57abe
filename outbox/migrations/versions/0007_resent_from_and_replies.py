"""a sent-again message's link to its original, and the accepting server's reply per attempt

Revision ID: 0007
Revises: 0006

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade():
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("resent_from", Id, nullable=True))
        batch.create_index("ix_messages_resent_from", ["resent_from"])
        batch.create_foreign_key(
            "fk_messages_resent_from", "messages", ["resent_from"], ["id"], ondelete="SET NULL"
        )
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("reply", sa.String(255), nullable=True))


def downgrade():
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("reply")
    with op.batch_alter_table("messages") as batch:
        batch.drop_constraint("fk_messages_resent_from", type_="foreignkey")
        batch.drop_index("ix_messages_resent_from")
        batch.drop_column("resent_from")
