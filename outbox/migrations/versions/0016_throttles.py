"""throttles (issue 16): a token bucket per route and per recipient domain, shared by every worker

Revision ID: 0016
Revises: 0015

"""

# revision identifiers, used by Alembic.
revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved: filled in by the change that needs it (issue 16)


def downgrade() -> None:
    pass
