"""wakes: how many staff moves made messages due now, watched by idle workers that probe

Revision ID: 0026
Revises: 0025

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    wakes = op.create_table(
        "wakes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("moves", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(wakes, [{"id": 1, "moves": 0}])


def downgrade() -> None:
    op.drop_table("wakes")
