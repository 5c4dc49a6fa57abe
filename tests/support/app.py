"""The app fixtures: an app on a test database, its clients, an SMTP server, staff, messages.

`app` (and `client`, `runner`, `make_message`, `staff`, ..., which build on it) is an app
on a SQLite file of the test's own, copied from one migrated once per session;
validation, HTTP status mapping, pages, forms and CLI arguments are tested there, once.
A test whose outcome can depend on the database (claims and locking, types and lengths
stored and read back, SQL that differs by dialect: counts, rollups, search, pagination;
migrations, concurrency, outages) is marked `@pytest.mark.all_databases` and gets an app
on each of SQLite, MariaDB and PostgreSQL (tests/support/databases.py).
"""

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from outbox import create_app, queue
from outbox.core import addresses
from outbox.core.drafts import Draft
from outbox.models import Message, User
from outbox.models.db import db, dispose_engines

from .databases import empty_tables
from .smtpd import SmtpServer


def _no_fsync(dbapi_connection, record) -> None:  # type: ignore[no-untyped-def]
    """Commit without waiting for the disk: a test's SQLite file need not survive a power cut."""
    dbapi_connection.execute("PRAGMA synchronous=OFF")


def base_config(url: str, **extra: object) -> dict[str, object]:
    """The settings of a test app on url: no real mail server, short timeouts; extra overrides."""
    config: dict[str, object] = {
        "TESTING": True,
        "DATABASE_URL": url,
        "SECRET_KEY": "test",
        "MAIL_DEFAULT_SENDER": "outbox@example.com",
        "MAIL_PORT": 1,
        "SMTP_TIMEOUT": 5.0,
        "RETRY_DELAY": 60.0,
        "RETRY_BACKOFF": 2.0,
        "MAX_ATTEMPTS": 3,
    }
    config.update(extra)
    return config


@pytest.fixture
def app(database_url: str, tmp_path: Path) -> Iterator[Flask]:
    """An app on a migrated database with every table empty (see the module docstring)."""
    app = create_app(base_config(database_url))
    app.instance_path = str(tmp_path)
    app.test_client_class = OwnContextClient
    with app.app_context():
        if database_url.startswith("sqlite"):
            sa.event.listen(db.engine, "connect", _no_fsync)
        else:
            empty_tables()
        yield app
        db.session.remove()
        dispose_engines()


class OwnContextClient(FlaskClient):
    """A test client whose every request runs in an app context of its own, as in production.

    The app fixture keeps one app context pushed for the whole test so that tests can
    use db.session; without this a request would reuse it, and flask.g (where
    Flask-Login keeps the signed-in user and Flask-WTF the CSRF token) and the
    database session would carry over from one request, and one client, to the next.
    """

    def open(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with self.application.app_context():
            # Read the whole body while the context is there; it closes the response too.
            return super().open(*args, **{**kwargs, "buffered": True})


@pytest.fixture
def client(app: Flask):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture
def runner(app: Flask):  # type: ignore[no-untyped-def]
    return app.test_cli_runner()


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer().start()
    yield server
    server.stop()


@pytest.fixture
def smtp_app(app: Flask, smtp: SmtpServer) -> Flask:
    """The app pointed at the recording SMTP server."""
    app.config["MAIL_PORT"] = smtp.port
    app.extensions["mail"].port = smtp.port
    return app


def draft(**fields: Any) -> Draft:
    """A Draft whose addresses may be given as text, parsed as the API parses them."""
    for name in ("from_addr", "reply_to"):
        if isinstance(fields.get(name), str):
            fields[name] = addresses.parse([fields[name]])[0]
    for name in ("to", "cc", "bcc"):
        if name in fields:
            fields[name] = addresses.parse([str(value) for value in fields[name]])
    return Draft(**fields)


@pytest.fixture
def make_message(app: Flask):  # type: ignore[no-untyped-def]
    """Queue a message straight through queue.enqueue; keyword arguments override the draft."""

    def make(now: datetime | None = None, max_attempts: int | None = None, **fields) -> Message:  # type: ignore[no-untyped-def]
        values = {"from_addr": "outbox@example.com", "to": ["rcpt@example.com"],
                  "subject": "Hello", "text": "Hello there"}  # fmt: skip
        values.update(fields)
        message, _ = queue.enqueue(
            draft(**values),
            source="test",
            max_attempts=max_attempts or app.config["MAX_ATTEMPTS"],
            now=now,
        )
        return message

    return make


@pytest.fixture(scope="session")
def staff_password_hash() -> str:
    """The staff password's hash, made once: scrypt at a 32nd of outbox's cost (N=1024, not
    32768). Checking it is still scrypt, read from the hash as outbox reads every hash, but
    in 3 ms, not a tenth of a second: the lockout tests check it 40 times a test."""
    return generate_password_hash("correct horse", "scrypt:1024:8:1")


@pytest.fixture
def staff(app: Flask, staff_password_hash: str) -> User:
    """A staff account: staff@example.com / correct horse."""
    user = User(email="staff@example.com", password_hash=staff_password_hash)
    db.session.add(user)
    db.session.commit()
    return user


@pytest.fixture
def signed_in(app: Flask, staff):  # type: ignore[no-untyped-def]
    """A test client whose session belongs to the staff account."""
    client = app.test_client()
    with client.session_transaction() as session:
        session["_user_id"] = staff.get_id()
        session["_fresh"] = True
    return client
