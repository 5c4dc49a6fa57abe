"""The docs' database and user, made as they say on the real servers, are enough for outbox.

The SQL blocks of "Running it for real" are run as written, with a name and password of
this test's own in place of `outbox` and `secret`; then outbox, connected as that user,
migrates the empty database, signs a staff account in (which deletes failures) and
sends a mail to a real SMTP server.
"""

import os
import re
import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app, queue, worker
from outbox.auth import accounts
from outbox.models.db import dispose_engines
from outbox.ops import rollups
from tests.support.app import base_config, draft
from tests.support.databases import server_database
from tests.support.smtpd import SmtpServer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb),
           pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip


def documented_sql(kind: str) -> list[str]:
    """The statements of the docs' SQL block for this server, in order."""
    section = PAGE.read_text().split("## Running it for real", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sql\n(.*?)```", section, re.DOTALL)
    marker = "GRANT " if kind == "mariadb" else "CREATE ROLE "
    (block,) = [b for b in blocks if marker in b]
    return [s.strip() for s in block.split(";") if s.strip()]


def admin_engine(kind: str) -> sa.Engine:
    """A superuser's connection outside any outbox database (root, postgres)."""
    url = sa.engine.make_url(server_database(kind))  # skips (fails under CI) if down
    if kind == "mariadb":
        return sa.create_engine(url.set(database=""), isolation_level="AUTOCOMMIT")
    return sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")


def cleanup(kind: str, name: str) -> list[str]:
    if kind == "mariadb":
        return [f"DROP DATABASE IF EXISTS {name}", f"DROP USER IF EXISTS '{name}'@'%'"]
    return [f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"DROP ROLE IF EXISTS {name}"]


@pytest.mark.parametrize("kind", SERVERS)
def test_the_documented_database_and_grants_let_outbox_migrate_and_send(
    kind: str, smtp: SmtpServer, tmp_path: Path
) -> None:
    name, password = f"outbox_grants_{os.getpid()}", secrets.token_hex(8)
    statements = [
        re.sub(r"\boutbox\b", name, s).replace("'secret'", f"'{password}'")
        for s in documented_sql(kind)
    ]
    admin = admin_engine(kind)
    try:
        with admin.connect() as conn:
            for statement in [*cleanup(kind, name), *statements]:
                conn.execute(sa.text(statement))
        served = sa.engine.make_url(server_database(kind))
        url = served.set(username=name, password=password, database=name)
        config = base_config(url.render_as_string(hide_password=False), MAIL_PORT=smtp.port)
        app = create_app(config)
        app.instance_path = str(tmp_path)
        with app.app_context():
            upgrade()
            accounts.create_user("staff@example.com", "correct horse")
            assert accounts.sign_in("staff@example.com", "wrong", "192.0.2.1") is None
            assert accounts.sign_in("staff@example.com", "correct horse", "192.0.2.1")
            mail = draft(from_addr="outbox@example.com", to=["ann@example.com"], subject="Hi",
                         text="Granted.")  # fmt: skip
            queue.enqueue(mail, source="test", max_attempts=3)
            drainer = worker.Worker()
            assert (drainer.drain().sent, len(smtp.received)) == (1, 1)
            rollups.count_if_due(drainer.worker_id)
            dispose_engines()
    finally:
        with admin.connect() as conn:
            for statement in cleanup(kind, name):
                conn.execute(sa.text(statement))
        admin.dispose()
