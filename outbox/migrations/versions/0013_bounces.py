"""bounces (issue 15): placeholder, filled in by the bounces work

Revision ID: 0013
Revises: 0012

"""

# revision identifiers, used by Alembic.
revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
