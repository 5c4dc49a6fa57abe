"""The test databases: SQLite, MariaDB and PostgreSQL, and which tests run on which.

A test whose outcome can depend on the database is marked `@pytest.mark.all_databases`
and runs on SQLite, MariaDB and PostgreSQL; `db_kind` names the one. A test for
particular servers only parametrizes `db_kind` itself, e.g.
`@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])`.
OUTBOX_TEST_DATABASES (e.g. `sqlite`, or `sqlite,postgres`) deselects the tests of the
servers it leaves out, so that `make check` needs no database server.

The server databases are made and migrated once per session (per pid, so that runs side
by side do not meet) and every table is emptied before each test.
"""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app
from outbox.models.db import Base, db, dispose_engines

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


def empty_tables() -> None:
    """Delete every row of every table, so that a server database starts each test empty."""
    for table in TABLES:
        db.session.execute(sa.text(f"DELETE FROM {table}"))
    db.session.commit()


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


def _kinds() -> set[str] | None:
    """The database kinds OUTBOX_TEST_DATABASES allows, or None (unset) for all three."""
    named = os.environ.get("OUTBOX_TEST_DATABASES", "").strip()
    if not named:
        return None
    kinds = {kind.strip() for kind in named.split(",") if kind.strip()}
    unknown = kinds - {"sqlite", *SERVER_URLS}
    if unknown:
        raise pytest.UsageError(
            f"OUTBOX_TEST_DATABASES names {', '.join(sorted(unknown))}: "
            "the kinds are sqlite, mariadb and postgres"
        )
    return kinds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests of the servers OUTBOX_TEST_DATABASES leaves out."""
    kinds = _kinds()
    if kinds is None:
        return
    left_out = [kind for kind in SERVER_URLS if kind not in kinds]
    dropped = [item for item in items if any(item.get_closest_marker(k) for k in left_out)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture
def db_kind(request: pytest.FixtureRequest) -> str:
    """sqlite, or with @pytest.mark.all_databases each of sqlite, mariadb and postgres."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated from empty once per session; each SQLite test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "outbox.sqlite3"
    with create_app({"DATABASE_URL": f"sqlite:///{path}"}).app_context():
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
