"""inline parts: an attachment's Content-ID, for the HTML that shows it as cid:

Revision ID: 0020
Revises: 0019

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TABLES = ("attachments", "mailing_attachments")


def upgrade():
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("content_id", sa.String(250), nullable=True))


def downgrade():
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("content_id")
