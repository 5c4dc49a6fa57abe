"""`outbox worker` and `outbox send-queued`: the drain (outbox.worker), until stopped or once."""

import click
from flask import current_app

from outbox import worker
from outbox.capabilities.capture import transport as capture
from outbox.capabilities.guardrails import pauses as guardrails
from outbox.capabilities.routes import warn_unsafe as warn_unsafe_routes
from outbox.cli.pause import said
from outbox.core import logs
from outbox.ops import pause, rollups
from outbox.worker import runner


def configure_logging() -> None:
    """Log to stderr as the app's LOG_FORMAT says (outbox.core.logs)."""
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
        click.echo(f"sending is paused {said(paused)}; nothing sent (outbox resume to go on)")
        return
    warn_unsafe_routes(current_app._get_current_object())  # type: ignore[attr-defined]
    capture.warn_mode(current_app.config)  # staging: mail kept, not sent
    drainer = worker.Worker()
    tally = drainer.drain()
    rollups.count_if_due(drainer.worker_id)
    guardrails.check_if_due(drainer.worker_id)
    click.echo(str(tally))
    if tally.fault:  # the server's or the settings' fault; the next pass tries again
        click.echo(f"sending is failing: {tally.fault}", err=True)
