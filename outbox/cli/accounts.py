"""The staff accounts' commands: create-user, set-role, set-password, unlock (outbox.auth)."""

import ipaddress

import click

from outbox.auth import accounts
from outbox.core.roles import ROLES


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
