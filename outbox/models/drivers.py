"""Database-driver policy: connection settings per kind, and a cheap liveness check for PyMySQL."""

import json
import select
import ssl
from typing import Any

from flask import Flask
from sqlalchemy import event, exc, make_url

from outbox.models.db import db


def engine_options(url: str, lanes: int = 1) -> dict[str, Any]:
    """Connection settings per database kind; lanes: a worker's sending threads (worker.py)."""
    # Text as it is, not \u escapes: the pages search the recipients column as text.
    options: dict[str, Any] = {"pool_pre_ping": True, "json_serializer": _json}
    if not url.startswith("sqlite"):
        # A connection kept for each lane and a few more: past pool_size, a connection
        # given back is closed, and lanes would connect anew all the time.
        options["pool_size"] = max(5, lanes + 2)
    if url.startswith(("mysql", "mariadb")):
        # READ COMMITTED: SKIP LOCKED claims under REPEATABLE READ deadlock far
        # more often, and a fresh read must see rows other workers just committed.
        options["isolation_level"] = "READ COMMITTED"
        options["pool_recycle"] = 3600
    elif url.startswith("postgresql"):
        options["isolation_level"] = "READ COMMITTED"
    if _checks_sockets(url):
        # _refuse_closed stands for the ping, without its round trip. A connection comes
        # back to the pool with no transaction open (Session and Connection end theirs
        # when they close), so the pool's ROLLBACK on return, a round trip too, undoes
        # nothing.
        options["pool_pre_ping"] = False
        options["pool_reset_on_return"] = None
    return options


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def watch_connections(app: Flask) -> None:
    """Give the app's engines the liveness check that stands for the ping, where it applies."""
    if not _checks_sockets(app.config["DATABASE_URL"]):
        return
    with app.app_context():
        for engine in db.engines.values():
            event.listen(engine, "checkout", _refuse_closed)


def _checks_sockets(url: str) -> bool:
    """Whether the engine of url takes _refuse_closed instead of a ping (PyMySQL's)."""
    return make_url(url).get_driver_name() == "pymysql"


def _refuse_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """Refuse a pooled connection that the server has closed, as a failed ping would.

    A server that restarts, dies or times a connection out closes its end; an idle
    connection has nothing to read unless that happened, so looking for something to
    read tells what a ping round trip would, at a hundredth of its cost. TLS may send
    records of its own, so a TLS connection is pinged as before.
    """
    sock = dbapi_connection._sock
    if isinstance(sock, ssl.SSLSocket):
        try:
            dbapi_connection.ping(False)
            return
        except Exception:  # whatever PyMySQL raises, a ping that fails is a dead link
            alive = False
    elif sock is None:
        alive = False
    else:
        poll = select.poll()
        poll.register(sock, select.POLLIN | select.POLLPRI)
        alive = not poll.poll(0)
    if not alive:
        # Like a failed pre-ping: the other pooled connections are likely gone too.
        raise exc.InvalidatePoolError("the database server closed the connection")
