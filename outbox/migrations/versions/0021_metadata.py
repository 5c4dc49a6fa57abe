"""metadata: an app's own labels for a message, given back in answers and webhooks

Revision ID: 0021
Revises: 0020

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("meta", sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("meta")
