"""each worker's sending fault (the server's or the settings'), for the dashboard's banner

Revision ID: 0006
Revises: 0005

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade():
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("fault", sa.Text(), nullable=True))
        batch.add_column(sa.Column("fault_since", Timestamp, nullable=True))


def downgrade():
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("fault_since")
        batch.drop_column("fault")
