"""`outbox webhook ...`: add, list and remove endpoints, and deliver what is due now."""

import click
from flask import current_app

from outbox.capabilities.webhooks import deliver, endpoints, events
from outbox.models import utcnow


@click.group("webhook")
def webhook_group() -> None:
    """Webhook endpoints: the URLs told of sent, deferred, failed, refused, bounced,
    complained of and suppressed mail."""


@webhook_group.command("add")
@click.argument("url")
@click.option("--events", "chosen", multiple=True, metavar="KIND",
              help=f"An event kind it takes ({', '.join(events.KINDS)}); repeat, or separate "
              "with commas. Default: all.")  # fmt: skip
def add_command(url: str, chosen: tuple[str, ...]) -> None:
    """Register URL as an endpoint; print its signing secret as the last line (shown once).

    It takes every event kind by default, stored as the list of kinds there are now.
    A URL whose host is private is refused unless OUTBOX_WEBHOOK_ALLOW_PRIVATE=true.
    """
    try:
        endpoint, secret = endpoints.add(url, " ".join(chosen))
    except endpoints.Invalid as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"webhook endpoint {endpoint.id}: {endpoint.url} ({endpoint.events})")
    click.echo("its signing secret (shown once; give it to the receiver):")
    click.echo(secret)


@webhook_group.command("list")
def list_command() -> None:
    """List the endpoints: id, state (disabled: with why), URL and kinds; never the secrets."""
    found = endpoints.listed()
    if not found:
        click.echo("no webhook endpoints")
    for endpoint in found:
        state = "enabled" if endpoint.enabled else f"DISABLED ({endpoint.disabled_reason})"
        click.echo(f"{endpoint.id}\t{state}\t{endpoint.url}\t{endpoint.events}")


@webhook_group.command("remove")
@click.argument("endpoint_id", metavar="ID", type=int)
def remove_command(endpoint_id: int) -> None:
    """Remove the endpoint ID and its deliveries."""
    if not endpoints.remove(endpoint_id):
        raise click.ClickException(f"no webhook endpoint {endpoint_id}")
    click.echo(f"removed webhook endpoint {endpoint_id}")


@webhook_group.command("deliver")
def deliver_command() -> None:
    """Send every due delivery now, once, as a worker does every OUTBOX_WEBHOOK_INTERVAL.

    Prints what came of each.
    """
    deliver.warn_unsafe(current_app.config)
    click.echo(str(deliver.run_due(f"cli:{utcnow().isoformat()}")))
