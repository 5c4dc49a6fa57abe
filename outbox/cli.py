"""The outbox commands bound to the app: the worker, tokens and staff accounts."""

import logging

import click
from flask import Flask, current_app

from . import accounts, runner, smtp, tokens, worker


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")


@click.command("worker")
@click.option(
    "--processes", type=click.IntRange(min=1), default=1, show_default=True,
    help="Worker processes to run side by side; a stop reaches them all, a crashed one is "
    "started again.",
)  # fmt: skip
def worker_command(processes: int) -> None:
    """Run a worker: drain the queue every OUTBOX_POLL_INTERVAL seconds until stopped."""
    configure_logging()
    if processes > 1:
        raise SystemExit(runner.run_many(processes))
    runner.run(current_app._get_current_object())  # type: ignore[attr-defined]


@click.command("send-queued")
def send_queued_command() -> None:
    """Send every due message once, refresh the pages' full counts if due, and exit."""
    configure_logging()
    smtp.warn_unsafe(current_app.config)
    drainer = worker.Worker()
    tally = drainer.drain()
    worker.count_if_due(drainer.worker_id)
    click.echo(str(tally))
    if tally.fault:  # the server's or the settings' fault; the next pass tries again
        click.echo(f"sending is failing: {tally.fault}", err=True)


@click.command("create-token")
@click.argument("name")
def create_token_command(name: str) -> None:
    """Make an API token called NAME and print it (it is shown only this once)."""
    try:
        token = tokens.create(name)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"API token {name!r} (shown once; store it now):")
    click.echo(token)


@click.command("revoke-token")
@click.argument("name")
def revoke_token_command(name: str) -> None:
    """Revoke the API token called NAME."""
    if not tokens.revoke(name):
        raise click.ClickException(f"no live token named {name!r}")
    click.echo(f"revoked {name!r}")


@click.command("create-user")
@click.argument("email")
@click.password_option(help="The password; asked for when not given.")
def create_user_command(email: str, password: str) -> None:
    """Make a staff account that can sign in to the web pages."""
    try:
        accounts.create_user(email, password)
    except accounts.AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"created {email}")


@click.command("set-password")
@click.argument("email")
@click.password_option(help="The new password; asked for when not given.")
def set_password_command(email: str, password: str) -> None:
    """Give a staff account a new password; its open sessions end."""
    try:
        accounts.set_password(email, password)
    except accounts.AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"password changed for {email}")


def register(app: Flask) -> None:
    """Add the outbox commands to the app's CLI."""
    for command in (
        worker_command,
        send_queued_command,
        create_token_command,
        revoke_token_command,
        create_user_command,
        set_password_command,
    ):
        app.cli.add_command(command)
