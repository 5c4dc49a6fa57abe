"""The suppression list's commands: outbox suppress, unsuppress, suppressions export and import."""

import sys
from pathlib import Path

import click

from outbox.capabilities.suppression import manage
from outbox.models.db import db


@click.command("suppress")
@click.argument("address")
@click.option("--reason", required=True, help="Why, shown on the list and in the audit trail.")
@click.option(
    "--expires",
    "days",
    type=click.IntRange(1, 36500),
    help="Days until the entry stops suppressing; without it, for good.",
)
def suppress_command(address: str, reason: str, days: int | None) -> None:
    """Put ADDRESS on the suppression list: no message is sent to it while it is there.

    Says so if it was there already.
    """
    try:
        entry, new = manage.add(address, reason, manage.expiry(days=days))
    except manage.Invalid as exc:
        raise click.ClickException(str(exc)) from None
    until = f" until {entry.expires_at:%Y-%m-%d %H:%M} UTC" if entry.expires_at else ""
    if new:
        click.echo(f"suppressed {entry.address}{until}: {entry.reason}")
    else:
        click.echo(f"{entry.address} was on the list already ({entry.source}): {entry.reason}")


@click.command("unsuppress")
@click.argument("address")
def unsuppress_command(address: str) -> None:
    """Take ADDRESS off the suppression list: the next message to it is sent.

    Exits 1 if it was not on the list.
    """
    try:
        found = manage.remove(address)
    except manage.Invalid as exc:
        raise click.ClickException(str(exc)) from None
    if found is None:
        raise click.ClickException(f"{address} is not on the suppression list")
    click.echo(f"removed {found.address} from the suppression list")


@click.group("suppressions")
def suppressions_group() -> None:
    """The suppression list as CSV: export it, or import addresses into it."""


@suppressions_group.command("export")
@click.argument(
    "file", type=click.Path(dir_okay=False, writable=True, path_type=Path), required=False
)
def export_command(file: Path | None) -> None:
    """Write the whole list as CSV to FILE, or to standard output without one."""
    lines = manage.export_rows()
    if file is None:
        for chunk in lines:
            sys.stdout.write(chunk)
        return
    with file.open("w", encoding="utf-8", newline="") as out:
        for chunk in lines:
            out.write(chunk)
    click.echo(f"exported the suppression list to {file}", err=True)


@suppressions_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def import_command(file: Path) -> None:
    """Suppress the addresses of a CSV FILE (columns address, reason, optional expires_at).

    All or none: any bad line is named by its number and nothing is imported.
    """
    try:
        with file.open(encoding="utf-8-sig", newline="") as lines:
            done = manage.import_csv(lines)
    except (manage.Invalid, UnicodeDecodeError) as exc:
        db.session.rollback()
        raise click.ClickException(str(exc)) from None
    click.echo(f"imported {done.added} addresses; {done.listed} were on the list already")


COMMANDS = (suppress_command, unsuppress_command, suppressions_group)
