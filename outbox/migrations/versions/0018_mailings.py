"""mailings (issue 16): one body for many recipients

Revision ID: 0018
Revises: 0017

"""

# revision identifiers, used by Alembic.
revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved: filled in by the change that needs it (issue 16)


def downgrade() -> None:
    pass
