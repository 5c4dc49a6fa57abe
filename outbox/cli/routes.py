"""`outbox routes`: the SMTP routes the workers send through, their rules and limits."""

from typing import Any

import click
from flask import current_app

from outbox.capabilities import routes
from outbox.capabilities.routes import Route, Rule


def _tls(route: Route) -> str:
    found = route.settings
    said = "TLS" if found.use_ssl else "STARTTLS" if found.use_tls else "none"
    if said != "none" and not found.verify:
        said += " (not verified)"
    return said


def _route_line(route: Route) -> str:
    found = route.settings
    parts = [f"{route.name}: {found.where}", f"TLS {_tls(route)}"]
    if found.logs_in:
        parts.append(f"login {found.username}")
    parts.append(f"{route.max_connections} connection{'s' * (route.max_connections != 1)}"
                 " a worker process")  # fmt: skip
    if route.rate is not None:
        parts.append(f"at most {route.rate:g} mails a second")
    if route.streams is not None:
        parts.append(f"streams {', '.join(route.streams)}")
    return ", ".join(parts)


def _rule_line(n: int, rule: Rule) -> str:
    conditions: list[Any] = []
    if rule.sender_domain is not None:
        conditions.append(f"from {rule.sender_domain}")
    if rule.recipient_domain is not None:
        conditions.append(f"every recipient at {rule.recipient_domain}")
    if rule.min_priority is not None:
        conditions.append(f"priority {rule.min_priority} or more")
    chain = " then ".join((rule.route, *rule.fallback))
    return f"{n}. {' and '.join(conditions) or 'any message'}: {chain}"


@click.command("routes")
def routes_command() -> None:
    """Show the SMTP routes the workers send through, as the settings make them.

    The routes (the first is the default) with server, TLS, login, connections, rate and
    streams; then the rules, first match wins; then the per-domain rate limits. Made from
    OUTBOX_ROUTES when it names a routes file, else from OUTBOX_MAIL_*. Passwords are
    never shown. Flask's map of the web app's URLs is `outbox urls`.
    """
    table = routes.table()
    source = current_app.config.get("ROUTES")
    click.echo(f"Routes, from {source or 'OUTBOX_MAIL_*'} (the first is the default):")
    for route in table.routes.values():
        click.echo(f"  {_route_line(route)}")
    if table.rules:
        click.echo("Rules, the first that matches a message chooses its routes:")
        for n, rule in enumerate(table.rules, 1):
            click.echo(f"  {_rule_line(n, rule)}")
    if table.domains:
        click.echo("Rate limits by recipient domain (mails a second):")
        for domain, rate in table.domains.items():
            click.echo(f"  {'any other domain' if domain == '*' else domain}: {rate:g}")
