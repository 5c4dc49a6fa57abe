"""Migrations that move data: each runs from the revision before it on every database."""

from datetime import datetime

import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app, mime
from outbox.addresses import Kind, Mailbox
from outbox.extensions import db, dispose_engines
from outbox.models import Message
from outbox.rendered import Features

from .conftest import base_config

NOW = datetime(2030, 1, 10, 12, 0, 0)
# Address columns as revision 0004 stored them: checked text, joined with ", ".
OLD_ROWS = [
    {"from_addr": "Shop <shop@example.com>", "reply_to": '"Help, Desk" <help@example.com>',
     "to_addrs": 'Ann <ann@example.com>, bob@example.com, "Doe, J" <j@example.com>',
     "cc_addrs": "Zoë Ärger <zoe@example.com>", "bcc_addrs": "hidden@example.com"},
    {"from_addr": "outbox@example.com", "reply_to": None, "to_addrs": "a@example.com",
     "cc_addrs": "", "bcc_addrs": ""},
]  # fmt: skip


@pytest.mark.all_databases
def test_0005_parses_the_stored_address_text_into_parts(empty_database_url):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0004")
            old = sa.table("messages", *(sa.column(n) for n in (
                "message_id", "from_addr", "reply_to", "to_addrs", "cc_addrs", "bcc_addrs",
                "subject", "status", "attempts", "max_attempts", "next_attempt_at",
                "created_at", "source", "priority", "attachment_count")))  # fmt: skip
            with db.engine.begin() as conn:
                conn.execute(old.insert(), [
                    {**row, "message_id": f"<{n}@example.com>", "subject": "Hi",
                     "status": "queued", "attempts": 0, "max_attempts": 3, "next_attempt_at": NOW,
                     "created_at": NOW, "source": "test", "priority": 0, "attachment_count": 0}
                    for n, row in enumerate(OLD_ROWS)
                ])  # fmt: skip
            upgrade()
            first, second = db.session.scalars(sa.select(Message).order_by(Message.id)).all()
            assert first.sender == Mailbox("shop@example.com", "Shop")
            assert first.reply_to_mailbox == Mailbox("help@example.com", "Help, Desk")
            assert first.recipients_of(Kind.TO) == [
                Mailbox("ann@example.com", "Ann"), Mailbox("bob@example.com"),
                Mailbox("j@example.com", "Doe, J")]  # fmt: skip
            assert first.recipients_of(Kind.CC) == [Mailbox("zoe@example.com", "Zoë Ärger")]
            assert first.recipients_of(Kind.BCC) == [Mailbox("hidden@example.com")]
            assert (second.sender, second.reply_to_mailbox) == (Mailbox("outbox@example.com"), None)
            assert second.recipients == [{"kind": "to", "address": "a@example.com"}]
            # A converted row is sent like a new one: the envelope names each address once.
            mail = mime.prepare(first, []).for_server(Features())
            assert mail.recipients == ["ann@example.com", "bob@example.com", "j@example.com",
                                       "zoe@example.com", "hidden@example.com"]  # fmt: skip
            db.session.commit()
        finally:
            db.session.remove()
            dispose_engines()
