"""The domain doctor's command: outbox domains check."""

import json

import click
from flask import current_app

from outbox.capabilities.dkim import published
from outbox.capabilities.domains import doctor
from outbox.models import utcnow

WIDTH = 10  # the check names' column


@click.group("domains")
def domains_group() -> None:
    """The domains outbox sends as: SPF, DKIM, DMARC, MX, MTA-STS and TLS-RPT in DNS."""


@domains_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(as_json: bool) -> None:
    """Check every sending domain in DNS (the From domains of the last 30 days, the DKIM
    keys' domains, the bounce address's); exit status 1 if any check finds a problem.
    OUTBOX_DNS_RESOLVERS names the DNS servers."""
    try:
        report = doctor.run(current_app.config, utcnow())
    except published.BadResolvers as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        for line in table(report):
            click.echo(line)
    if report.verdict == doctor.PROBLEM:
        raise SystemExit(1)


def table(report: doctor.Report) -> list[str]:
    """The report as lines: per domain its verdict, then each check's verdict, record and why."""
    if not report.domains:
        return ["no sending domain: no mail in 30 days, no DKIM key, no bounce address"]
    lines = []
    for domain in report.domains:
        lines.append(f"{domain.name} ({', '.join(domain.roles)}): {domain.verdict.upper()}")
        for check in domain.checks:
            lines.append(f"  {check.name:<{WIDTH}}{check.verdict:<9}{check.why}")
            if check.found:
                lines.append(f"  {'':<{WIDTH}}{'found':<9}{check.found}")
            for publish in (check.publish or "").splitlines():
                lines.append(f"  {'':<{WIDTH}}{'publish':<9}{publish}")
    lines.extend(f"note: {note}" for note in report.notes)
    return lines
