"""addresses stored as parsed: sender and reply-to names apart, recipients as a JSON list

Revision ID: 0005
Revises: 0004

The address columns held joined text ("Ann <ann@example.com>, bob@example.com") that
every send parsed again. Each row's text is parsed once here, in batches by id.
"""

from email.utils import getaddresses, parseaddr

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BATCH = 1000
LongText = sa.Text().with_variant(sa.dialects.mysql.LONGTEXT(), "mysql", "mariadb")


def _listed(kind, text):
    return [
        {"kind": kind, "address": address, **({"name": name} if name else {})}
        for name, address in getaddresses([text or ""])
        if address
    ]


def upgrade():
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("from_name", sa.String(998), nullable=False, server_default=""))
        batch.add_column(
            sa.Column("reply_to_name", sa.String(998), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("recipients", sa.JSON(), nullable=True))
    messages = sa.table(
        "messages",
        sa.column("id", sa.BigInteger()),
        sa.column("from_addr", sa.String()),
        sa.column("from_name", sa.String()),
        sa.column("reply_to", sa.String()),
        sa.column("reply_to_name", sa.String()),
        sa.column("to_addrs", sa.Text()),
        sa.column("cc_addrs", sa.Text()),
        sa.column("bcc_addrs", sa.Text()),
        sa.column("recipients", sa.JSON()),
    )
    conn = op.get_bind()
    c = messages.c
    last = 0
    while True:
        rows = conn.execute(
            sa.select(c.id, c.from_addr, c.reply_to, c.to_addrs, c.cc_addrs, c.bcc_addrs)
            .where(c.id > last)
            .order_by(c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        values = []
        for row in rows:
            from_name, from_addr = parseaddr(row.from_addr or "")
            reply_name, reply_to = parseaddr(row.reply_to or "")
            listed = _listed("to", row.to_addrs) + _listed("cc", row.cc_addrs)
            values.append({
                "pk": row.id, "from_addr": from_addr or row.from_addr, "from_name": from_name,
                "reply_to": reply_to or None, "reply_to_name": reply_name,
                "recipients": listed + _listed("bcc", row.bcc_addrs),
            })  # fmt: skip
        conn.execute(
            messages.update()
            .where(c.id == sa.bindparam("pk"))
            .values(
                from_addr=sa.bindparam("from_addr"),
                from_name=sa.bindparam("from_name"),
                reply_to=sa.bindparam("reply_to"),
                reply_to_name=sa.bindparam("reply_to_name"),
                recipients=sa.bindparam("recipients"),
            ),
            values,
        )
        last = rows[-1].id
    with op.batch_alter_table("messages") as batch:
        batch.alter_column("recipients", existing_type=sa.JSON(), nullable=False)
        batch.alter_column("from_name", server_default=None, existing_type=sa.String(998))
        batch.alter_column("reply_to_name", server_default=None, existing_type=sa.String(998))
        batch.drop_column("to_addrs")
        batch.drop_column("cc_addrs")
        batch.drop_column("bcc_addrs")


def downgrade():
    raise NotImplementedError("the joined address columns are not made again")
