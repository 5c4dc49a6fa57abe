"""The outbox commands, each in the module of what it commands, all registered here.

Most run on the app (app.cli): Flask makes it from the settings and pushes its context.
Two run on the `outbox` group itself, before any app is made: `outbox check` reports
the settings create_app refuses, and `outbox demo` makes its app with settings of its own.
"""

import logging
from collections.abc import Callable
from typing import Any

import click
from flask import Flask
from flask.cli import FlaskGroup
from flask.cli import routes_command as url_map_command

from outbox.cli import (
    accounts,
    bounces,
    checkup,
    demo,
    dkim,
    domains,
    guardrails,
    pause,
    retention,
    routes,
    smtpd,
    suppression,
    tokens,
    webhooks,
    worker,
)

OF_THE_APP: tuple[click.Command, ...] = (
    worker.worker_command,
    worker.send_queued_command,
    pause.pause_command,
    pause.resume_command,
    tokens.create_token_command,
    tokens.revoke_token_command,
    accounts.create_user_command,
    accounts.set_role_command,
    accounts.set_password_command,
    accounts.unlock_command,
    checkup.command,  # on the group too; here for the app's test runner and `flask`
    retention.purge_command,
    *suppression.COMMANDS,
    bounces.bounces_command,
    webhooks.webhook_group,
    dkim.dkim_group,
    domains.domains_group,
    guardrails.guardrails_group,
    smtpd.smtpd_command,
    routes.routes_command,
)
WITHOUT_AN_APP: tuple[click.Command, ...] = (demo.command, checkup.command)


def register(app: Flask) -> None:
    """Add the commands that run on the app to its CLI."""
    for command in OF_THE_APP:
        app.cli.add_command(command)
    app.cli.add_command(Migrations())


class Migrations(click.Group):
    """`outbox db`: Flask-Migrate's commands, imported only when the group is used.

    Flask-Migrate brings Alembic, Mako and Pygments, a sixth of the start of every outbox
    process; a worker should not pay for `outbox db` at each start.
    """

    def __init__(self) -> None:
        super().__init__("db", help="Perform database migrations (Flask-Migrate).")

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:  # fmt: skip
        # Alembic logs each of its plugins as it loads them, after outbox's logging is set.
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
        from flask_migrate.cli import db

        return db.make_context(info_name, args, parent=parent, **extra)


def group(create_app: Callable[..., Flask]) -> FlaskGroup:
    """The `outbox` command: Flask's commands, the app's and those that need no app."""
    main = FlaskGroup(create_app=create_app, help="outbox: a database-backed mail outbox.",
                      add_version_option=False)  # fmt: skip
    click.version_option(package_name="outbox", message="outbox %(version)s")(main)
    # `outbox routes` is the SMTP routes (outbox.cli.routes, on the app); Flask's map of
    # URLs, which FlaskGroup names routes, stays as `outbox urls`.
    main.commands.pop("routes", None)
    main.add_command(url_map_command, "urls")
    for command in WITHOUT_AN_APP:
        main.add_command(command)
    return main
