"""webhooks (issue 15): placeholder, filled in by the webhooks work

Revision ID: 0014
Revises: 0013

"""

# revision identifiers, used by Alembic.
revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
