"""the account each failed sign-in named, so that an admin can unlock one person

Revision ID: 0008
Revises: 0007

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("sign_in_failures") as batch:
        batch.add_column(sa.Column("email", sa.String(255), nullable=True))


def downgrade():
    with op.batch_alter_table("sign_in_failures") as batch:
        batch.drop_column("email")
