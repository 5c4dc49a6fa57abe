"""`outbox bounces --listen`: run the bounce listener (outbox.capabilities.bounces.inbound)."""

import click
from flask import current_app

from outbox.capabilities.bounces import inbound, store
from outbox.cli import listen
from outbox.smtp import server


@click.command("bounces")
@click.option("--listen", "where", metavar="HOST:PORT", required=True,
              help="Where to take bounce mails over SMTP: 127.0.0.1:2525.")  # fmt: skip
def bounces_command(where: str) -> None:
    """Take bounce mails over SMTP for OUTBOX_BOUNCE_ADDRESS and its VERP forms until stopped.

    Runs until SIGTERM or SIGINT; first reads any mail stored but left unread by a
    stopped one.
    """
    host, port = listen.address(where)
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if not app.config.get("BOUNCE_ADDRESS"):
        raise click.UsageError("set OUTBOX_BOUNCE_ADDRESS first: the address bounces come to")
    try:
        listener = server.Server(server.Connection, inbound.Handler(app))
    except ValueError as exc:
        raise click.UsageError(f"OUTBOX_BOUNCE_MAX_CONNECTIONS: {exc}") from None
    waiting = store.process_waiting()  # left unread by a process that stopped in between
    if waiting:
        click.echo(f"processed {waiting} bounce mails stored earlier")
    with listener:
        try:
            listener.listen(host, port, inbound.options(app))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        click.echo(f"taking bounces for {app.config['BOUNCE_ADDRESS']} on {host}:{port}")
        listener.run()
    click.echo("stopped")
