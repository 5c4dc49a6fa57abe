"""waiting bounces: a hard bounce kept until its recipient's send is recorded

Revision ID: 0023
Revises: 0022

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("bounce_mails") as batch:
        batch.add_column(
            sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.create_index("ix_bounce_mails_waiting", ["waiting", "message_pk"])


def downgrade():
    with op.batch_alter_table("bounce_mails") as batch:
        batch.drop_index("ix_bounce_mails_waiting")
        batch.drop_column("waiting")
