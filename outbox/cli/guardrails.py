"""The guardrails' commands: outbox guardrails status and outbox guardrails resume DOMAIN."""

import click

from outbox.auth import audit
from outbox.capabilities.guardrails import pauses
from outbox.ops.pause import cli_actor


@click.group("guardrails")
def guardrails_group() -> None:
    """Rates per sending domain and stream, and domains whose broadcast mail they paused."""


@guardrails_group.command("status")
def status_command() -> None:
    """Print the paused domains with why, then every rate against its threshold."""
    for pause in pauses.listed():
        if pause.paused_at is not None:
            when = pause.paused_at.strftime("%Y-%m-%d %H:%M:%S UTC")
            click.echo(f"paused {pause.domain} since {when}: {pause.reason}")
    for rate in pauses.rates():
        shown = "-" if rate.percent is None else f"{rate.percent:.2f}%"
        mark = " OVER" if rate.over else ("" if rate.counts else " (too few to count)")
        click.echo(f"{rate.domain} {rate.stream} {rate.window} {rate.kind}: {shown} of "
                   f"{rate.recipients}, threshold {rate.threshold:g}%{mark}")  # fmt: skip


@guardrails_group.command("resume")
@click.argument("domain")
def resume_command(domain: str) -> None:
    """Resume DOMAIN's broadcast mail; only outcomes from the next hour on can pause it again."""
    lifted = pauses.resume(domain, cli_actor())
    if lifted is None:
        click.echo(f"{pauses.normal(domain)} is not paused: nothing to resume")
        return
    audit.record("guardrail resume", detail=lifted.domain)
    click.echo(f"resumed broadcast mail from {lifted.domain}")
