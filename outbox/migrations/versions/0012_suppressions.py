"""suppressions (issue 15): placeholder, filled in by the suppressions work

Revision ID: 0012
Revises: 0011

"""

# revision identifiers, used by Alembic.
revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
