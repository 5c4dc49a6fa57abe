"""Fixtures: apps on SQLite, MariaDB and PostgreSQL, a real SMTP server, a message factory.

Which database a test runs on:

- `app` (and `client`, `runner`, `make_message`, `staff`, ..., which build on it) is an
  app on a SQLite file of the test's own, copied from one migrated once per session.
  Validation, HTTP status mapping, pages, forms and CLI arguments are tested there, once.
- A test whose outcome can depend on the database (claims and locking, types and lengths
  stored and read back, SQL that differs by dialect: counts, rollups, search,
  pagination; migrations, concurrency, outages) is marked `@pytest.mark.all_databases`
  and runs on SQLite, MariaDB and PostgreSQL; `db_kind` names the one.
- A test for particular servers only parametrizes `db_kind` itself, e.g.
  `@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])`.

The server databases are made and migrated once per session (per pid, so that runs side
by side do not meet) and every table is emptied before each test.
"""

import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from flask_migrate import upgrade
from werkzeug.security import generate_password_hash

from outbox import addresses, create_app, queue
from outbox.drafts import Draft
from outbox.extensions import Base, db, dispose_engines
from outbox.models import Message, User

from .postfix import *  # noqa: F403 (the smtp-sink and Postfix fixtures)
from .smtpd import SmtpServer

# Each test run gets databases of its own, dropped at the end, so that runs side by
# side on one server do not drop each other's tables.
TEST_DB = f"outbox_test_{os.getpid()}"
MARIADB_URL = os.environ.get(
    "OUTBOX_TEST_MARIADB_URL", f"mysql+pymysql://root@127.0.0.1:3306/{TEST_DB}?charset=utf8mb4"
)
POSTGRES_URL = os.environ.get(
    "OUTBOX_TEST_POSTGRES_URL", f"postgresql+psycopg://postgres@127.0.0.1:5432/{TEST_DB}"
)
SERVER_URLS = {"mariadb": MARIADB_URL, "postgres": POSTGRES_URL}
# Every table of the models, children before their parents; alembic_version is not a
# model's and stays.
TABLES = [table.name for table in reversed(Base.metadata.sorted_tables)]
DATABASES = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb),
             pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip


def _admin(url: str, statement: str) -> None:
    """Run a CREATE or DROP DATABASE for the test database of url."""
    target = sa.engine.make_url(url)
    if target.get_backend_name() == "mysql":
        admin = sa.create_engine(target.set(database=""))
    else:
        admin = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(statement.format(name=target.database))
            conn.commit()
    finally:
        admin.dispose()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for kind, problem in _ready.items():
        if problem is None:
            _admin(SERVER_URLS[kind], "DROP DATABASE IF EXISTS {name}")


_ready: dict[str, str | None] = {}


def server_database(kind: str) -> str:
    """The URL of a freshly migrated test database, or skip (fail under CI) if unreachable."""
    if kind not in _ready:
        url = SERVER_URLS[kind]
        try:
            _admin(url, "DROP DATABASE IF EXISTS {name}")
            _admin(url, "CREATE DATABASE {name}")
            _ready[kind] = None
        except sa.exc.OperationalError as exc:
            _ready[kind] = f"{kind} unreachable at {url}: {exc.orig}"
        if _ready[kind] is None:
            with create_app({"DATABASE_URL": url}).app_context():
                upgrade()
                dispose_engines()
    problem = _ready[kind]
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return SERVER_URLS[kind]


def _no_fsync(dbapi_connection, record) -> None:  # type: ignore[no-untyped-def]
    """Commit without waiting for the disk: a test's SQLite file need not survive a power cut."""
    dbapi_connection.execute("PRAGMA synchronous=OFF")


def _empty_tables() -> None:
    for table in TABLES:
        db.session.execute(sa.text(f"DELETE FROM {table}"))
    db.session.commit()


def base_config(url: str, **extra: object) -> dict[str, object]:
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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test marked all_databases on every database kind, unless it names its own."""
    if "db_kind" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("all_databases") is None:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if isinstance(names, str):
            names = names.split(",")
        if "db_kind" in [name.strip() for name in names]:
            return
    metafunc.parametrize("db_kind", DATABASES, indirect=True)


@pytest.fixture
def db_kind(request: pytest.FixtureRequest) -> str:
    """sqlite, or with @pytest.mark.all_databases each of sqlite, mariadb and postgres."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated from empty once per session; each SQLite test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "outbox.sqlite3"
    with create_app(base_config(f"sqlite:///{path}")).app_context():
        upgrade()
        dispose_engines()
    return path


@pytest.fixture
def database_url(db_kind: str, sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated database: a copy of the SQLite template, or the server's (emptied by app)."""
    if db_kind == "sqlite":
        copy = tmp_path / "outbox.sqlite3"
        shutil.copyfile(sqlite_template, copy)
        return f"sqlite:///{copy}"
    return server_database(db_kind)


@pytest.fixture
def empty_database_url(db_kind: str, tmp_path: Path) -> Iterator[str]:
    """A database of db_kind with no tables at all, for the migrations to start from."""
    if db_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite3'}"
        return
    served = sa.engine.make_url(server_database(db_kind))  # skips if the server is down
    url = served.set(database=f"{served.database}_empty").render_as_string(hide_password=False)
    _admin(url, "DROP DATABASE IF EXISTS {name}")
    _admin(url, "CREATE DATABASE {name}")
    try:
        yield url
    finally:
        _admin(url, "DROP DATABASE IF EXISTS {name}")


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
            _empty_tables()
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
    """The staff password's hash, made once: scrypt takes a tenth of a second a hash."""
    return generate_password_hash("correct horse")


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
