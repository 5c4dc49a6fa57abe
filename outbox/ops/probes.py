"""/healthz (the process answers) and /readyz (database, schema, worker), without sessions."""

import functools
from datetime import timedelta
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError

from outbox.models import WorkerBeat, utcnow
from outbox.models.db import db

bp = Blueprint("health", __name__)
# The paths no session is opened or saved for (web.HttpsAwareSessions): a probe every
# few seconds should neither unsign a cookie nor set one.
PATHS = ("/healthz", "/readyz", "/metrics")
MIGRATIONS = "outbox.migrations_folder"  # app.extensions key: where the scripts are


def init_app(app: Flask, migrations: str) -> None:
    """Add the probes; the newest migration is read when first asked for (schema_head)."""
    app.extensions[MIGRATIONS] = migrations
    app.register_blueprint(bp)


@functools.cache
def _head(migrations: str) -> str | None:
    # Alembic is imported here, not at start: with Mako and Pygments it is a sixth of
    # the start of every outbox process, and only readiness and `outbox check` ask.
    from alembic.script import ScriptDirectory

    return ScriptDirectory(migrations).get_current_head()


def schema_head() -> str | None:
    """The newest revision of the app's migration scripts."""
    return _head(current_app.extensions[MIGRATIONS])


@bp.get("/healthz")
def healthz() -> Response:
    """The process answers; nothing else is looked at."""
    return Response("ok\n", mimetype="text/plain")


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    """200 if every check passes, else 503; the JSON names each check and what it found."""
    checks = ready_checks()
    ready = all(check["ok"] for check in checks.values())
    return jsonify(ready=ready, checks=checks), 200 if ready else 503


def ready_checks() -> dict[str, dict[str, Any]]:
    """The database answers, its schema is at the scripts' head, and (if asked) a worker lives."""
    config = current_app.config
    head = schema_head()
    names = ["database", "schema"] + (["worker"] if config["READY_NEEDS_WORKER"] else [])
    checks: dict[str, dict[str, Any]] = {}
    try:
        # A connection of the engine's pool, not the request's session: nothing to close.
        with db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            checks["database"] = {"ok": True}
            checks["schema"] = schema_at(conn, head)
            if config["READY_NEEDS_WORKER"]:
                checks["worker"] = _worker(conn, 2 * config["POLL_INTERVAL"])
    except SQLAlchemyError as exc:
        failed = next(name for name in names if name not in checks)
        checks[failed] = {"ok": False, "error": _short(exc)}
    for name in names:
        checks.setdefault(name, {"ok": False, "error": "not checked: the database failed"})
    return checks


def schema_at(conn: Any, head: str | None) -> dict[str, Any]:
    """The revision the database is at (at), beside the scripts' head."""
    try:
        found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except SQLAlchemyError as exc:
        conn.rollback()
        return {"ok": False, "head": head, "error": _short(exc)}
    at = found[0] if len(found) == 1 else None
    return {"ok": at == head, "at": at, "head": head}


def _worker(conn: Any, within: float) -> dict[str, Any]:
    last = conn.execute(select(func.max(WorkerBeat.last_seen_at))).scalar()
    age = None if last is None else (utcnow() - last).total_seconds()
    ok = last is not None and last >= utcnow() - timedelta(seconds=within)
    return {"ok": ok, "last_seen_seconds_ago": age, "within_seconds": within}


def _short(exc: SQLAlchemyError) -> str:
    """The driver's words without SQLAlchemy's long trailer."""
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:300]
