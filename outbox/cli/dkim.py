"""The DKIM commands: outbox dkim add, list, remove and check."""

import click
from flask import current_app

from outbox.capabilities.dkim import keys, published
from outbox.models import utcnow
from outbox.models.db import db


@click.group("dkim")
def dkim_group() -> None:
    """DKIM signing keys: each signs mail from its domain and from subdomains without keys."""


@dkim_group.command("add")
@click.argument("domain")
@click.option("--selector", required=True, help="The key's name in DNS: SELECTOR._domainkey.DOMAIN")
@click.option("--algorithm", "kind", default="rsa", show_default=True, help="rsa or ed25519.")
@click.option(
    "--bits",
    default=2048,
    show_default=True,
    help="RSA key size: 1024 to 4096 (Ed25519's is fixed).",
)
def add_command(domain: str, selector: str, kind: str, bits: int) -> None:
    """Make a key pair for DOMAIN, store it, and print the DNS TXT record to publish.

    Workers sign with it within DKIM_REFRESH seconds: publish the record first thing.
    """
    try:
        key = keys.add(domain, selector, kind, bits, utcnow())
    except keys.Invalid as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"added {key.algorithm} key {key.selector} for {key.domain}; publish in DNS:")
    click.echo(keys.zone_line(key))


@dkim_group.command("list")
@click.option("--records", is_flag=True, help="Print each key's DNS TXT record too.")
def list_command(records: bool) -> None:
    """Every key: domain, selector, algorithm and when it was made (UTC)."""
    for key in keys.listed():
        made = f"{key.created_at:%Y-%m-%d %H:%M}"
        click.echo(f"{key.domain}\t{key.selector}\t{key.algorithm}\t{made}")
        if records:
            click.echo(f"  {keys.zone_line(key)}")


@dkim_group.command("remove")
@click.argument("domain")
@click.option("--selector", required=True, help="The selector of the key to remove.")
def remove_command(domain: str, selector: str) -> None:
    """Delete a key: workers stop signing with it within DKIM_REFRESH seconds."""
    try:
        key = keys.remove(domain, selector)
    except keys.Invalid as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"removed key {key.selector} of {key.domain}; its DNS record may go once no "
               "mail signed with it is still on its way")  # fmt: skip


@dkim_group.command("check")
@click.argument("domains", nargs=-1)
def check_command(domains: tuple[str, ...]) -> None:
    """Ask DNS for each key's TXT record (of DOMAINS, or every key) and say whether it is
    the key's; exit status 1 if any is missing or not the key's. OUTBOX_DNS_RESOLVERS names
    the DNS servers."""
    try:
        wanted = {keys.signing_domain(domain) for domain in domains}
        asking = published.resolver(current_app.config["DNS_RESOLVERS"])
    except (keys.Invalid, published.BadResolvers) as exc:
        raise click.ClickException(str(exc)) from None
    chosen = [key for key in keys.listed() if not wanted or key.domain in wanted]
    db.session.commit()  # nothing held open while DNS answers
    if not chosen:
        named = f" for {', '.join(sorted(wanted))}" if wanted else ""
        raise click.ClickException(f"no DKIM key{named}")
    findings = [published.check(key, asking) for key in chosen]
    for found in findings:
        click.echo(f"ok    {found.name}" if found.problem is None
                   else f"FAIL  {found.name}: {found.problem}")  # fmt: skip
    if any(found.problem is not None for found in findings):
        raise SystemExit(1)
