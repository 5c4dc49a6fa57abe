"""routes (issue 16): the route each attempt went through, and each route's health

Revision ID: 0015
Revises: 0014

"""

# revision identifiers, used by Alembic.
revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved: filled in by the change that needs it (issue 16)


def downgrade() -> None:
    pass
