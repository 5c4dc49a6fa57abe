"""`outbox create-token` and `outbox revoke-token`: the API tokens (outbox.auth.tokens)."""

import click

from outbox.auth import tokens
from outbox.core.roles import SCOPES


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
