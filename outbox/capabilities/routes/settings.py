"""The relay's settings: OUTBOX_MAIL_*, the default route, and OUTBOX_ROUTES, the routes file.

The MAIL_* names are Flask-Mail's: outbox reads them as a Flask app would (the drop-in
client's apps keep theirs), and they describe the route called `default`.
"""

from collections.abc import Mapping
from typing import Any

from outbox import smtp
from outbox.core.config_schema import BOOL, INT, NUMBER, TEXT, Group, Setting


def check(config: Mapping[str, Any]) -> None:
    """ValueError naming the setting if the default route cannot be used."""
    if config["MAIL_MAX_CONNECTIONS"] < 1:
        raise ValueError("MAIL_MAX_CONNECTIONS must be at least 1")
    if config["MAIL_USE_TLS"] and config["MAIL_USE_SSL"]:
        raise ValueError("MAIL_USE_TLS (STARTTLS) and MAIL_USE_SSL (implicit TLS): set one")
    if config["MAIL_TLS_CA_FILE"]:  # loaded now, once: connections use what it held
        try:
            smtp.tls_context(config["MAIL_TLS_VERIFY"], config["MAIL_TLS_CA_FILE"])
        except smtp.SettingsError as exc:
            raise ValueError(str(exc)) from None


# fmt: off
GROUP = Group(
    "Relay and routes",
    "The SMTP server outbox sends through (the route `default`), or the routes file that "
    "replaces it (see Routes).",
    (
        Setting("MAIL_SERVER", TEXT, "127.0.0.1",
                description="SMTP host"),
        Setting("MAIL_PORT", INT, 25,
                description="SMTP port"),
        Setting("MAIL_USE_TLS", BOOL, False,
                description="STARTTLS after connecting (port 587); a server that does not offer "
                "it gets nothing"),
        Setting("MAIL_USE_SSL", BOOL, False,
                description="TLS from the first byte (port 465); not together with `MAIL_USE_TLS`"),
        Setting("MAIL_USERNAME", TEXT, None,
                description="SMTP AUTH user (CRAM-MD5, PLAIN or LOGIN; UTF-8 is fine), used when "
                "it and `MAIL_PASSWORD` are set, and only over TLS"),
        Setting("MAIL_PASSWORD", TEXT, None,
                description="SMTP AUTH password (UTF-8 is fine), used when it and `MAIL_USERNAME` "
                "are set, and only over TLS"),
        Setting("MAIL_TLS_VERIFY", BOOL, True,
                description="check the server's certificate and host name (`MAIL_SERVER`) against "
                "the system's trust store; `false` is the only way to stop that, and every worker "
                "start then logs a warning"),
        Setting("MAIL_TLS_CA_FILE", TEXT, None,
                description="PEM file of CAs trusted besides the system's (a private CA); read at "
                "start, an unusable file stops it"),
        # Without TLS the password is not sent at all, unless this says it may be.
        Setting("MAIL_ALLOW_PLAINTEXT_AUTH", BOOL, False,
                description="let the password go over a connection without TLS; every worker "
                "start then logs a warning"),
        Setting("MAIL_MAX_CONNECTIONS", INT, 1, unit="connections",
                description="SMTP connections each worker process keeps busy at once through the "
                "`OUTBOX_MAIL_*` server (a thread each; see Several connections per process). A "
                "relay a round trip of 50 ms away takes about 20 mails a second over one "
                "connection"),
        Setting("SMTP_TIMEOUT", NUMBER, 30.0, unit="seconds",
                description="seconds one SMTP socket operation may take before the attempt is "
                "deferred"),
        Setting("ROUTES", TEXT, None,
                description="a TOML or JSON file of SMTP routes, rules and per-domain limits (a "
                "relative path is taken in `instance/`; see Routes); without it, one route from "
                "the `OUTBOX_MAIL_*` settings"),
    ),
    check,
)
# fmt: on
