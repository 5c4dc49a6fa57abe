"""create_app: the one way to build the outbox app, with its layered configuration."""

import contextlib
import logging
import os
import secrets
import tempfile
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import event, exc

from outbox import api, cli, queue, web
from outbox import config as settings
from outbox.auth import tokens
from outbox.capabilities.bounces import store as bounces
from outbox.capabilities.guardrails import board as guardrails
from outbox.capabilities.guardrails import hours as guardrail_hours
from outbox.capabilities.mailings import render as mailing_render
from outbox.capabilities.mailings import unsubscribe
from outbox.capabilities.routes import config as routes_file
from outbox.capabilities.submission import raw as submission_raw
from outbox.capabilities.submission import store as submission_store
from outbox.capabilities.suppression import screen as suppression_screen
from outbox.capabilities.suppression import smtp as suppression_smtp
from outbox.capabilities.webhooks import events
from outbox.core import logs
from outbox.core.kinds import MessageKind
from outbox.extensions import Migrations, mail
from outbox.models import drivers
from outbox.models.db import AUTOCOMMIT, db
from outbox.ops import metrics, probes
from outbox.queue import doorbell
from outbox.worker import batch

log = logging.getLogger(__name__)
PACKAGE = Path(__file__).resolve().parent
MIGRATIONS = str(PACKAGE / "migrations")
# A wheel carries templates/ and static/ inside the package (pyproject.toml maps them
# there); a checkout, installed editable or not at all, keeps them beside it.
FROM_WHEEL = (PACKAGE / "templates").is_dir()
FILES = PACKAGE if FROM_WHEEL else PACKAGE.parent


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app: package defaults, instance/config.py, OUTBOX_* variables, test_config."""
    app = Flask(
        "outbox",
        instance_path=instance_folder(),
        instance_relative_config=True,
        template_folder=str(FILES / "templates"),
        static_folder=str(FILES / "static"),
    )
    app.config.from_mapping(settings.DEFAULTS)
    app.config.from_pyfile("config.py", silent=True)
    app.config.from_mapping(settings.from_environ(os.environ))
    if test_config is not None:
        app.config.from_mapping(test_config)
    _derive(app)
    settings.check(app.config)
    # Under gunicorn outbox's own warnings (a lost connection, a refused setting) reach
    # stderr in LOG_FORMAT too; a process that set up logging already keeps its own.
    logs.setup(app.config["LOG_FORMAT"])

    routes_file.init_app(app)  # routes: OUTBOX_ROUTES, read once, refused if wrong
    loaded = app.extensions.get(routes_file.KEY)
    lanes = loaded.lanes if loaded else app.config["MAIL_MAX_CONNECTIONS"]
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = drivers.engine_options(
        app.config["DATABASE_URL"], lanes
    )
    db.init_app(app)
    drivers.watch_connections(app)
    _private_sqlite_files(app)
    # Runs before Flask-SQLAlchemy's own teardown (the later registered runs first).
    app.teardown_appcontext(_close_session)
    mail.init_app(app)
    Migrations(app, db, MIGRATIONS)
    app.extensions[tokens.CACHE] = tokens.Cache(app.config["TOKEN_CACHE_SECONDS"])

    app.register_blueprint(api.bp)
    probes.init_app(app, MIGRATIONS)
    metrics.init_app(app)
    metrics.on_scrape(app, guardrails.gauges)
    web.init_app(app)
    app.register_blueprint(unsubscribe.bp)
    cli.register(app)
    _queue_hooks(app)
    return app


def _queue_hooks(app: Flask) -> None:
    """What the queue calls as it stores, records and queues again, in the order each point
    runs its hooks, and who builds and copies each kind of message (outbox.queue.hooks, kinds)."""
    # A new message: its recipients on the suppression list marked, then their events told.
    queue.on_store(app, suppression_screen.screen, suppression_screen.announce)
    # A group of outcomes recorded: recipients refused as unknown (5.1.1) suppressed, then
    # the webhooks' events; a dead worker's claim taken back: its event.
    queue.on_outcomes(app, suppression_smtp.suppress_refused)
    queue.on_outcomes(app, events.recorded)
    # ...and the recipients sent and refused counted for the guardrails' rates.
    queue.on_outcomes(app, guardrail_hours.recorded)
    guardrail_hours.init_app(app)
    queue.on_lost(app, events.lost)
    # After those, any new status: a bounce that came before its send was recorded.
    queue.on_recorded(app, bounces.apply_waiting)
    # Failed or cancelled messages queued again: their marks brought up to date with the list.
    queue.on_requeue(app, suppression_screen.restate)
    # Due messages committed ring this host's workers' doorbells (no NOTIFY but PostgreSQL's).
    doorbell.listen()
    queue.on_kind(app, MessageKind.PLAIN, build=batch.plain_mail, send_again=queue.copy_plain)
    queue.on_kind(app, MessageKind.MAILING, build=mailing_render.prepare,
                  send_again=mailing_render.send_again)  # fmt: skip
    queue.on_kind(app, MessageKind.RAW, build=submission_raw.prepare,
                  send_again=submission_store.copied)  # fmt: skip


def instance_folder() -> str | None:
    """OUTBOX_INSTANCE_PATH, else instance/ in a checkout, else None: Flask's own choice.

    For an installed package Flask takes <prefix>/var/outbox-instance, where <prefix> is
    the virtualenv (or ~/.local for a --user install): outside site-packages, so an
    upgrade leaves it alone, and the same for every user and working directory that runs
    this install's outbox (a deploy's `outbox db upgrade` and the service's gunicorn).
    """
    chosen = os.environ.get("OUTBOX_INSTANCE_PATH")
    if chosen:
        return str(Path(chosen).resolve())
    return None if FROM_WHEEL else str(FILES / "instance")


def _derive(app: Flask) -> None:
    """Fill in the settings the extensions read from the OUTBOX ones."""
    config = app.config
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    url = config["DATABASE_URL"] or f"sqlite:///{Path(app.instance_path) / 'outbox.sqlite3'}"
    config["DATABASE_URL"] = url
    config["SQLALCHEMY_DATABASE_URI"] = url
    if not url.startswith("sqlite"):
        # A message without attachments is one INSERT that commits itself: one round
        # trip to a database server instead of two (queue.enqueue).
        config["SQLALCHEMY_BINDS"] = {
            AUTOCOMMIT: {
                "url": url,
                "isolation_level": "AUTOCOMMIT",
                "skip_autocommit_rollback": True,
            }
        }
    config["SECRET_KEY"] = config["SECRET_KEY"] or _stored_secret(Path(app.instance_path))
    # The worker always really sends; Flask-Mail would otherwise stay silent in tests.
    config["MAIL_SUPPRESS_SEND"] = False
    # Werkzeug answers 413 past these, before a view reads the body.
    config["MAX_CONTENT_LENGTH"] = config["MAX_MESSAGE_BYTES"]
    config["MAX_FORM_MEMORY_SIZE"] = config["MAX_MESSAGE_BYTES"]


def _private_sqlite_files(app: Flask) -> None:
    """Have each SQLite engine create its file, if not there yet, for its owner only (0600).

    SQLite would create it under the umask, often readable by every local user; its
    journal and WAL files take the database file's mode. The file is made as the first
    connection opens, not before (a command refused early leaves nothing behind); an
    existing file is left as its owner set it.
    """
    with app.app_context():
        for engine in db.engines.values():
            path = engine.url.database
            if engine.dialect.name != "sqlite" or not path or path == ":memory:":
                continue
            if not path.startswith("file:") and engine.url.query.get("mode") != "memory":
                event.listen(engine, "do_connect", partial(_create_private, path))


def _create_private(path: str, *_: Any) -> None:
    """Create the empty file at path, mode 0600, unless there is one (or no folder)."""
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _stored_secret(instance: Path) -> str:
    """A random key kept in instance/secret_key, so sessions survive restarts.

    Several processes may start at once on a new instance folder: the key is written
    to a file of its own and linked into place, so the first link wins and no process
    reads a key half written.
    """
    path = instance / "secret_key"
    if not path.exists():
        fd, draft = tempfile.mkstemp(dir=instance, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        finally:
            os.unlink(draft)
    return path.read_text().strip()


def _close_session(error: BaseException | None) -> None:
    """End the request's session, even if the database went away after its work was done.

    A message may be stored on the autocommit engine while the session still holds the
    connection it read the token on; if the server restarts in between, that connection's
    ROLLBACK fails. SQLAlchemy invalidates it either way, and the answer already given
    (the message is stored) stands. A request that never used the session (most
    enqueues) has none to close; asking for one would make it.
    """
    if not db.session.registry.has():
        return
    try:
        db.session.close()
    except exc.DBAPIError as failure:
        log.warning("the session's connection was lost as the request ended: %s", failure.orig)
