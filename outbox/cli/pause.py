"""`outbox pause` and `outbox resume`: sending stopped and started again (outbox.ops.pause)."""

import click

from outbox.auth import audit
from outbox.models import Pause
from outbox.ops import pause


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
        click.echo(f"already paused {said(found)}")
        return
    click.echo(f"sending is paused {said(found)}")


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
    click.echo(f"resumed: sending was paused {said(lifted)}")


def said(found: Pause) -> str:
    """Who paused, when (UTC) and why: "by X since T: reason"."""
    when = found.paused_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"by {found.paused_by} since {when}" + (f": {found.reason}" if found.reason else "")
