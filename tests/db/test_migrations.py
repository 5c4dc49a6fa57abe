"""Migrations that move data: each runs from the revision before it on every database."""

from datetime import datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask_migrate import downgrade, upgrade

from outbox import create_app
from outbox.core.addresses import Kind, Mailbox
from outbox.mail import mime
from outbox.mail.rendered import Features
from outbox.models import Attempt, Message
from outbox.models.db import Base, db, dispose_engines
from tests.support.app import base_config

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


@pytest.mark.all_databases
def test_0007_adds_the_send_again_link_and_the_accepting_reply_and_goes_back(empty_database_url):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0006")
            old = sa.table("messages", sa.column("recipients", sa.JSON), *(sa.column(n) for n in (
                "message_id", "from_addr", "from_name", "reply_to_name", "subject",
                "status", "attempts", "max_attempts", "next_attempt_at", "created_at", "source",
                "priority", "attachment_count")))  # fmt: skip
            row = {"from_addr": "shop@example.com", "from_name": "", "reply_to_name": "",
                   "recipients": [{"kind": "to", "address": "a@example.com"}],
                   "subject": "Hi", "status": "sent", "attempts": 1, "max_attempts": 3,
                   "next_attempt_at": NOW, "created_at": NOW, "source": "test", "priority": 0,
                   "attachment_count": 0}  # fmt: skip
            with db.engine.begin() as conn:
                for n in range(2):
                    conn.execute(old.insert().values(**row, message_id=f"<{n}@example.com>"))
            upgrade()
            first, second = db.session.scalars(sa.select(Message).order_by(Message.id)).all()
            assert (first.resent_from, second.resent_from) == (None, None)
            second.resent_from = first.id
            reply = "2.0.0 Ok: queued as A1"
            db.session.add(Attempt(message_pk=first.id, started_at=NOW, finished_at=NOW,
                                   worker_id="w", outcome="sent", reply=reply))  # fmt: skip
            db.session.commit()
            assert db.session.scalar(sa.select(Attempt.reply)) == reply
            if db.engine.dialect.name != "sqlite":  # SQLite enforces no foreign keys here
                with pytest.raises(sa.exc.IntegrityError):
                    db.session.execute(sa.update(Message).where(Message.id == first.id)
                                       .values(resent_from=first.id + 100))  # fmt: skip
                    db.session.commit()
                db.session.rollback()
                # Deleting the original leaves the copy, unlinked.
                db.session.execute(sa.delete(Message).where(Message.id == first.id))
                db.session.commit()
                assert db.session.scalar(sa.select(Message.resent_from)) is None
            db.session.remove()
            downgrade(revision="0006")
            columns = {c["name"] for c in sa.inspect(db.engine).get_columns("messages")}
            assert "resent_from" not in columns
            upgrade()
        finally:
            db.session.remove()
            dispose_engines()


def _row(message_id: str) -> dict[str, object]:
    return {"message_id": message_id, "from_addr": "shop@example.com", "from_name": "",
            "reply_to_name": "", "recipients": [{"kind": "to", "address": "a@example.com"}],
            "subject": "Hi", "status": "queued", "attempts": 0, "max_attempts": 3,
            "next_attempt_at": NOW, "created_at": NOW, "source": "smtp:relay", "priority": 0,
            "attachment_count": 0}  # fmt: skip


@pytest.mark.all_databases
def test_0022_lets_the_parts_of_a_mail_share_its_message_id_and_goes_back(
    empty_database_url, caplog
):
    app = create_app(base_config(empty_database_url))
    table = sa.table("messages", sa.column("id"), sa.column("part"),
                     sa.column("recipients", sa.JSON),
                     *(sa.column(n) for n in _row("x") if n != "recipients"))  # fmt: skip
    with app.app_context():
        try:
            upgrade(revision="0021")
            with db.engine.begin() as conn:
                conn.execute(table.insert(), _row("<part@example.com>"))
            with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
                conn.execute(table.insert(), _row("<part@example.com>"))
            upgrade(revision="0022")
            with db.engine.connect() as conn:
                assert conn.scalar(sa.select(table.c.part)) == ""  # the rows there: first parts
            with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
                conn.execute(table.insert(), _row("<part@example.com>"))  # one first part
            with db.engine.begin() as conn:
                conn.execute(table.insert(), {**_row("<part@example.com>"), "part": "d1"})
            with db.engine.connect() as conn:  # the models and the migration agree
                diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert [d for d in diffs if "message_id" in repr(d) or "part" in repr(d)] == []
            indexes = {i["name"] for i in sa.inspect(db.engine).get_indexes("messages")}
            assert "ix_messages_claim" in indexes  # kept through SQLite's copy of the table
            with pytest.raises(SystemExit):  # Flask-Migrate logs the error and exits 1
                downgrade(revision="0021")
            assert "holds 1 further part(s)" in caplog.text
            with db.engine.begin() as conn:
                conn.execute(table.delete().where(table.c.part == "d1"))
            downgrade(revision="0021")
            with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
                conn.execute(table.insert(), _row("<part@example.com>"))
            upgrade()
        finally:
            db.session.remove()
            dispose_engines()
