"""`outbox purge`: retention (outbox.capabilities.retention) run now, from the command line."""

import click

from outbox.capabilities import retention


@click.command("purge")
@click.option(
    "--older-than",
    "days",
    type=click.IntRange(min=1),
    default=None,
    metavar="DAYS",
    help="Remove settled messages older than DAYS instead of OUTBOX_RETENTION_DAYS.",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; change nothing.")
def purge_command(days: int | None, dry_run: bool) -> None:
    """Remove old settled messages and drop old bodies now, as the workers do daily.

    Sent, failed and cancelled messages settled more than OUTBOX_RETENTION_DAYS ago go
    with their attempts and attachments; the bodies and attachments of those settled more
    than OUTBOX_RETENTION_BODY_DAYS ago are dropped. Prints what it removed.
    """
    if days is None and not retention.any_rule():
        click.echo("nothing to do: OUTBOX_RETENTION_DAYS, OUTBOX_RETENTION_BODY_DAYS and "
                   "OUTBOX_AUDIT_RETENTION_DAYS are 0")  # fmt: skip
        return
    done = retention.purge(days=days, dry_run=dry_run)
    click.echo(("would remove: " if dry_run else "removed: ") + str(done))
