"""dkim (issue 16): the signing keys of each domain

Revision ID: 0017
Revises: 0016

"""

# revision identifiers, used by Alembic.
revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved: filled in by the change that needs it (issue 16)


def downgrade() -> None:
    pass
