"""`outbox check`: the settings, the database, its schema and the SMTP server, with fix hints."""

import functools
import smtplib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import click
from flask import current_app
from flask.cli import ScriptInfo
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from outbox import config as settings
from outbox import smtp
from outbox.capabilities import routes
from outbox.capabilities.bounces import imap
from outbox.models.db import db
from outbox.ops import probes


@dataclass(frozen=True)
class Result:
    """One check: its name, whether it passed, what it found, and how to fix a failure."""

    name: str
    ok: bool
    found: str
    hint: str | None = None

    def lines(self) -> list[str]:
        shown = [f"{'ok  ' if self.ok else 'FAIL'}  {self.name:<9} {self.found}"]
        label = "fix" if not self.ok else "note"
        return shown + ([f"      {'':<9} {label}: {self.hint}"] if self.hint else [])


def run() -> list[Result]:
    """Every check in order; the schema is checked only if the database answered."""
    results = [check_config()]
    database = check_database()
    results.append(database)
    if database.ok:
        results.append(check_schema())
    results.extend(check_routes())  # routes: each route of OUTBOX_ROUTES
    if current_app.config.get("BOUNCE_IMAP_URL"):  # bounces: the bounce mailbox
        results.append(Result("bounces", *imap.probe(current_app.config)))
    return results


def check_config() -> Result:
    """The settings pass config.check (create_app ran it too) and name a sender."""
    config = current_app.config
    try:
        settings.check(config)
    except ValueError as exc:
        return Result("settings", False, str(exc), "change the OUTBOX_* setting it names")
    if not config["MAIL_DEFAULT_SENDER"]:
        return Result("settings", True, "valid; no OUTBOX_MAIL_DEFAULT_SENDER",
                      "set it, or every message must name its From")  # fmt: skip
    return Result("settings", True, "valid")


def check_database() -> Result:
    """Connect and run SELECT 1."""
    where = make_url(current_app.config["DATABASE_URL"]).render_as_string(hide_password=True)
    try:
        with db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return Result("database", False, f"{where}: {_first_line(exc)}",
                      "check OUTBOX_DATABASE_URL (host, port, user, password, database "
                      "name) and that the server runs and lets this host in")  # fmt: skip
    return Result("database", True, f"{where} answers")


def check_schema() -> Result:
    """The database's revision is the migration scripts' head."""
    head = probes.schema_head()
    with db.engine.connect() as conn:
        state = probes.schema_at(conn, head)
    if state["ok"]:
        return Result("schema", True, f"at the latest migration, {head}")
    at = state.get("at") or "no migration applied"
    return Result("schema", False, f"at {at}, the latest is {head}",
                  "run `outbox db upgrade` (safe on a live queue; back up first)")  # fmt: skip


def check_routes() -> list[Result]:
    """check_smtp for each route the workers send through: the default route of the
    OUTBOX_MAIL_* settings, or each route of OUTBOX_ROUTES."""
    table = routes.table()
    if not current_app.config["ROUTES"]:
        return [check_smtp(table.first.settings)]
    found = table.routes.values()
    return [check_smtp(route.settings, f"smtp {route.name}", route.name) for route in found]


def check_smtp(
    host_settings: smtp.HostSettings, name: str = "smtp", route: str | None = None
) -> Result:
    """Connect, STARTTLS or TLS as set (certificate checked), AUTH if set, EHLO; no mail.

    route names the route of OUTBOX_ROUTES the settings come from, for the hints.
    """
    where = host_settings.where
    hint = functools.partial(_smtp_hint, settings=host_settings, route=route)
    try:
        host = smtp.open_host(host_settings)
    except smtp.HostError as exc:
        return Result(name, False, str(exc), hint(exc))
    try:
        code, _ = host.ehlo()
        said = _features(host, host_settings)
        host.quit()
    except (OSError, smtplib.SMTPException) as exc:
        host.close()
        failure = smtp.explain(exc, host_settings)
        return Result(name, False, str(failure), hint(failure))
    if code != 250:
        return Result(name, False, f"{where} answered EHLO with {code}",
                      "outbox needs an ESMTP server (EHLO)")  # fmt: skip
    return Result(name, True, f"{where}: {said}; nothing was sent")


def _features(host: smtplib.SMTP, settings: smtp.HostSettings) -> str:
    """What the connection came to: encryption and login, in words."""
    tls = "TLS" if settings.use_ssl else "STARTTLS" if settings.use_tls else "no TLS"
    if (settings.use_ssl or settings.use_tls) and not settings.verify:
        tls += " (certificate NOT checked: OUTBOX_MAIL_TLS_VERIFY=false)"
    elif settings.use_ssl or settings.use_tls:
        tls += " (certificate checked)"
    login = f"logged in as {settings.username}" if settings.logs_in else "no AUTH"
    return f"EHLO answered, {tls}, {login}"


HINTS: list[tuple[Callable[[str], bool], str]] = [
    (lambda t: "not trusted" in t, "if the server's certificate comes from a private CA, set "
     "OUTBOX_MAIL_TLS_CA_FILE to that CA's PEM file; check OUTBOX_MAIL_SERVER is the name "
     "on the certificate"),
    (lambda t: "does not offer STARTTLS" in t, "for a port that speaks TLS from the first byte "
     "(465) set OUTBOX_MAIL_USE_SSL=true instead of OUTBOX_MAIL_USE_TLS"),
    (lambda t: "TLS" in t, "check OUTBOX_MAIL_PORT: 465 wants OUTBOX_MAIL_USE_SSL=true, "
     "587 and 25 OUTBOX_MAIL_USE_TLS=true"),
    (lambda t: "refused the login" in t or "AUTH" in t, "check OUTBOX_MAIL_USERNAME and "
     "OUTBOX_MAIL_PASSWORD, or unset both if the server takes mail without a login"),
    (lambda t: "timed out" in t, "a firewall may drop the packets; check OUTBOX_MAIL_SERVER, "
     "OUTBOX_MAIL_PORT, or raise OUTBOX_SMTP_TIMEOUT for a slow server"),
    (lambda t: "cannot connect" in t or "closed the connection" in t, "check OUTBOX_MAIL_SERVER "
     "and OUTBOX_MAIL_PORT, and that the mail server runs and lets this host in"),
]  # fmt: skip


# The keys of a route in OUTBOX_ROUTES that stand for the OUTBOX_MAIL_* settings in HINTS.
ROUTE_KEYS = {"OUTBOX_MAIL_TLS_CA_FILE": "ca_file", "OUTBOX_MAIL_SERVER": "host",
              "OUTBOX_MAIL_PORT": "port", "OUTBOX_MAIL_USE_SSL=true": 'tls = "ssl"',
              "OUTBOX_MAIL_USE_TLS=true": 'tls = "starttls"', "OUTBOX_MAIL_USE_TLS": "starttls",
              "OUTBOX_MAIL_USERNAME": "username", "OUTBOX_MAIL_PASSWORD": "password"}  # fmt: skip


def _smtp_hint(
    exc: smtp.HostError, settings: smtp.HostSettings, route: str | None = None
) -> str | None:
    if isinstance(exc, smtp.SettingsError):
        return None  # its text says which setting to change
    found = str(exc)
    hint = next((hint for matches, hint in HINTS if matches(found)), None)
    if hint is None or route is None:
        return hint
    for setting, key in ROUTE_KEYS.items():
        hint = hint.replace(setting, key)
    return f'in route "{route}" of OUTBOX_ROUTES: {hint}'


def _first_line(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:300]


def report(results: list[Result]) -> Iterator[str]:
    """The lines `outbox check` prints."""
    for result in results:
        yield from result.lines()
    failed = [r.name for r in results if not r.ok]
    yield f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}" if failed \
        else f"all {len(results)} checks passed"  # fmt: skip


@click.command("check")
@click.pass_context
def command(context: click.Context) -> None:
    """Check the settings, the database, its schema and the SMTP server (no mail is sent).

    Prints each result, with a hint for what fails; exits 1 if any check fails.
    """
    try:
        # Made here, not by the `outbox` group first: settings it refuses are a result too.
        app = context.ensure_object(ScriptInfo).load_app()
    except ValueError as exc:
        refused = Result("settings", False, str(exc), "change the OUTBOX_* setting it names")
        for line in report([refused]):
            click.echo(line)
        raise SystemExit(1) from None
    with app.app_context():
        results = run()
    for line in report(results):
        click.echo(line)
    if not all(result.ok for result in results):
        raise SystemExit(1)
