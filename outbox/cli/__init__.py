"""The outbox commands bound to the app: the worker, tokens and staff accounts."""

import ipaddress

import click
from flask import Flask, current_app

from outbox import worker
from outbox.auth import accounts, audit, tokens
from outbox.capabilities import retention
from outbox.capabilities.bounces import inbound
from outbox.capabilities.routes import warn_unsafe as warn_unsafe_routes
from outbox.cli import checkup, smtpd
from outbox.cli import dkim as dkim_cli
from outbox.cli import suppression as suppression_cli
from outbox.cli import webhooks as webhooks_cli
from outbox.core import logs
from outbox.core.roles import ROLES, SCOPES
from outbox.models import Pause
from outbox.ops import pause, rollups
from outbox.worker import runner


def configure_logging() -> None:
    """Log to stderr as the app's LOG_FORMAT says (outbox.logs)."""
    logs.setup(current_app.config["LOG_FORMAT"])


@click.command("worker")
@click.option(
    "--processes", type=click.IntRange(min=1), default=1, show_default=True,
    help="Worker processes to run side by side; a stop reaches them all, a crashed one is "
    "started again.",
)  # fmt: skip
def worker_command(processes: int) -> None:
    """Run a worker: drain the queue every OUTBOX_POLL_INTERVAL seconds until stopped.

    Drains now, then every OUTBOX_POLL_INTERVAL seconds, and logs one line for each pass
    that did something (sent 120, deferred 2, failed 0 in 0.8 s), nothing for an idle
    one, and a warning for trouble. SIGTERM or SIGINT (even when started with SIGINT
    ignored, as `outbox worker &` in a script is) finishes the message in hand, records
    the outcomes waiting, hands back the rest of the batch and exits 0. With --processes
    N, on Linux the workers get SIGTERM if this process is killed outright.
    """
    configure_logging()
    if processes > 1:
        raise SystemExit(runner.run_many(processes))
    runner.run(current_app._get_current_object())  # type: ignore[attr-defined]


@click.command("send-queued")
def send_queued_command() -> None:
    """Send every due message once, refresh the pages' full counts if due, and exit.

    One drain pass, then the full counts per status if they are OUTBOX_COUNT_INTERVAL
    old, then exit (for cron and tests); prints "sent N, deferred N, failed N". While
    sending is paused (outbox pause) it prints who paused and exits 0 without sending.
    """
    configure_logging()
    paused = pause.current()
    if paused is not None:
        click.echo(f"sending is paused {_paused(paused)}; nothing sent (outbox resume to go on)")
        return
    warn_unsafe_routes(current_app._get_current_object())  # type: ignore[attr-defined]
    drainer = worker.Worker()
    tally = drainer.drain()
    rollups.count_if_due(drainer.worker_id)
    click.echo(str(tally))
    if tally.fault:  # the server's or the settings' fault; the next pass tries again
        click.echo(f"sending is failing: {tally.fault}", err=True)


@click.command("pause")
@click.option("--reason", help="Why, shown on the dashboard beside who paused and when.")
def pause_command(reason: str | None) -> None:
    """Pause sending: every worker stops claiming within one poll interval.

    Messages a worker holds already are sent and recorded; enqueueing goes on.
    The dashboard shows who paused (here "cli" and your OS user), when and why.
    Prints who paused (cli (<OS user>)), when (UTC) and why; if already paused, says
    who paused first and changes nothing.
    """
    found, made = pause.pause(pause.cli_actor(), reason)
    if made:
        audit.record("pause", detail=reason)
    if not made:
        click.echo(f"already paused {_paused(found)}")
        return
    click.echo(f"sending is paused {_paused(found)}")


@click.command("resume")
def resume_command() -> None:
    """Resume sending after outbox pause; the workers claim again at their next tick.

    Prints the pause it lifted, or that sending was not paused.
    """
    lifted = pause.resume()
    if lifted is None:
        click.echo("not paused: sending was running, nothing to resume")
        return
    audit.record("resume")
    click.echo(f"resumed: sending was paused {_paused(lifted)}")


def _paused(found: Pause) -> str:
    """Who paused, when (UTC) and why: "by X since T: reason"."""
    when = found.paused_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"by {found.paused_by} since {when}" + (f": {found.reason}" if found.reason else "")


@click.command("create-token")
@click.argument("name")
@click.option(
    "--scope", "scopes", multiple=True, type=click.Choice(SCOPES),
    help="What the token may do: send (enqueue), read (GET), manage (resend, cancel); "
    "repeat for several. Default: all three.",
)  # fmt: skip
def create_token_command(name: str, scopes: tuple[str, ...]) -> None:
    """Make an API token called NAME and print it (it is shown only this once).

    The token is the last line printed; outbox keeps only its SHA-256 digest.
    """
    try:
        token = tokens.create(name, scopes or SCOPES)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"API token {name!r} (shown once; store it now):")
    click.echo(token)


@click.command("revoke-token")
@click.argument("name")
def revoke_token_command(name: str) -> None:
    """Revoke the API token called NAME.

    Requests with it get 401 from then on (after up to OUTBOX_TOKEN_CACHE_SECONDS in
    web processes that used it lately).
    """
    if not tokens.revoke(name):
        raise click.ClickException(f"no live token named {name!r}")
    click.echo(f"revoked {name!r}")


@click.command("create-user")
@click.argument("email")
@click.password_option(help="The password; asked for when not given.")
@click.option(
    "--role", type=click.Choice(ROLES),
    help="admin (accounts, tokens, resend all), sender (compose, resend, cancel) or viewer "
    "(read only). Default: admin for the first account, viewer after.",
)  # fmt: skip
def create_user_command(email: str, password: str, role: str | None) -> None:
    """Make a staff account that can sign in to the web pages."""
    try:
        user = accounts.create_user(email, password, role)
    except accounts.AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"created {email} ({user.role})")


@click.command("set-role")
@click.argument("email")
@click.argument("role", type=click.Choice(ROLES))
def set_role_command(email: str, role: str) -> None:
    """Give a staff account another role (the last admin stays one)."""
    try:
        accounts.set_role(email, role)
    except accounts.AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{email} is now {role}")


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


@click.command("unlock")
@click.argument("who", metavar="EMAIL-or-ADDRESS")
def unlock_command(who: str) -> None:
    """Lift the sign-in lockout of a client IP address, or the lockouts keeping EMAIL out.

    Five failed sign-ins from one address within 15 minutes lock that address out for
    the rest of the 15 minutes; an IPv6 address counts with its whole /64. Twenty at one
    account, from any addresses, lock that account out. For an EMAIL the account's
    lockout and those of the addresses that tried it are lifted; addresses that tried
    only other accounts stay locked. Prints what was lifted.
    """
    window = f"{accounts.FAILURE_WINDOW.seconds // 60} minutes"
    if "@" in who:
        try:
            lifted = accounts.unlock_account(who)
        except accounts.AccountError as exc:
            raise click.ClickException(str(exc)) from None
        if not lifted:
            click.echo(f"nothing to lift: {who} is not locked out, nor any address that tried it")
        for remote_addr, count in sorted(lifted.items()):
            click.echo(f"lifted the lockout of {remote_addr} ({count} failed sign-ins "
                       f"in the last {window})")  # fmt: skip
        return
    if not _is_address(who):
        raise click.ClickException(f"{who!r} is neither an email address nor an IP address")
    count = accounts.unlock_address(who)
    if count >= accounts.FAILURE_LIMIT:
        click.echo(f"lifted the lockout of {who} ({count} failed sign-ins in the last {window})")
    elif count:
        click.echo(f"nothing to lift: {who} was not locked out ({count} failed sign-ins "
                   f"in the last {window}, now forgotten)")  # fmt: skip
    else:
        click.echo(f"nothing to lift: no failed sign-ins from {who} in the last {window}")


def _is_address(text: str) -> bool:
    """An IP address, or an IPv6 /64 as `outbox unlock` names a locked-out one."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        try:
            return ipaddress.ip_network(text, strict=False).prefixlen == 64
        except ValueError:
            return False
    return True


def register(app: Flask) -> None:
    """Add the outbox commands to the app's CLI."""
    for command in (
        worker_command,
        send_queued_command,
        pause_command,
        resume_command,
        create_token_command,
        revoke_token_command,
        create_user_command,
        set_role_command,
        set_password_command,
        unlock_command,
        checkup.command,  # metrics: `outbox check`
        retention.purge_command,
        *suppression_cli.COMMANDS,
        inbound.bounces_command,  # bounces: `outbox bounces --listen`
        webhooks_cli.webhook_group,
        dkim_cli.dkim_group,  # dkim: `outbox dkim add|list|remove`
        smtpd.smtpd_command,  # submission: `outbox smtpd --listen`
    ):
        app.cli.add_command(command)
