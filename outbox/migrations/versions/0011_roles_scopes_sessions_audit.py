"""staff roles, token scopes, sign-out ending sessions, and the audit trail

Revision ID: 0011
Revises: 0010

Existing accounts become admins and existing tokens get every scope, so nobody loses
what they could do before.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# revision identifiers, used by Alembic.
revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade():
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="admin"))
        batch.add_column(
            sa.Column("session_generation", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(
            sa.Column("scopes", sa.String(64), nullable=False, server_default="send read manage")
        )
    # The defaults served only to fill the rows there were; the models set them from now on.
    with op.batch_alter_table("users") as batch:
        batch.alter_column("role", server_default=None, existing_type=sa.String(16))
        batch.alter_column("session_generation", server_default=None, existing_type=sa.Integer())
    with op.batch_alter_table("api_tokens") as batch:
        batch.alter_column("scopes", server_default=None, existing_type=sa.String(64))
    op.create_table(
        "audit_events",
        sa.Column("id", Id, primary_key=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("message_pk", sa.BigInteger(), nullable=True),
        sa.Column("remote_addr", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
    )
    op.create_index("ix_audit_events_message", "audit_events", ["message_pk", "id"])
    op.create_index("ix_audit_events_actor", "audit_events", ["actor", "id"])
    op.create_index("ix_audit_events_action", "audit_events", ["action", "id"])


def downgrade():
    op.drop_table("audit_events")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("scopes")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("session_generation")
        batch.drop_column("role")
