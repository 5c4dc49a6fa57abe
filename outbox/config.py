"""Configuration defaults and the OUTBOX_* environment variables that override them."""

from collections.abc import Mapping
from typing import Any

from . import admission, logs, smtp
from .bounces import settings as bounce_settings
from .status import shortest_lock_timeout

# Each default with its unit. Every name here can be set as OUTBOX_<NAME> in the
# environment or as <NAME> in instance/config.py.
DEFAULTS: dict[str, Any] = {
    "DATABASE_URL": None,  # any SQLAlchemy URL; None means instance/outbox.sqlite3
    "SECRET_KEY": None,  # str; None means a random key kept in instance/secret_key
    "MAIL_SERVER": "127.0.0.1",  # host name
    "MAIL_PORT": 25,  # TCP port
    "MAIL_USE_TLS": False,  # STARTTLS after connecting
    "MAIL_USE_SSL": False,  # implicit TLS from the first byte
    "MAIL_USERNAME": None,  # SMTP AUTH user, None for no AUTH
    "MAIL_PASSWORD": None,  # SMTP AUTH password (UTF-8 is fine)
    # TLS certificates and host names are checked against the system's trust store;
    # false is the only way to stop that, and every worker start then logs a warning.
    "MAIL_TLS_VERIFY": True,  # bool
    "MAIL_TLS_CA_FILE": None,  # path of a PEM file of CAs trusted besides the system's
    # Without TLS the password is not sent at all, unless this says it may be.
    "MAIL_ALLOW_PLAINTEXT_AUTH": False,  # bool
    "MAIL_DEFAULT_SENDER": None,  # address used as From when a message names none
    # SMTP connections each worker process keeps busy at once (the default route's).
    "MAIL_MAX_CONNECTIONS": 1,  # connections
    # --- routes, throttling, DKIM, mailings ---
    # A TOML or JSON file of SMTP routes, rules and per-domain limits (README "Routes");
    # a relative path is taken in the instance folder. None: one route from MAIL_*.
    "ROUTES": None,  # path
    # dkim: how often each process rereads the signing keys (`outbox dkim`).
    "DKIM_REFRESH": 60.0,  # seconds
    # DNS servers `outbox dkim check` asks, "host[:port]" comma-separated; "": the system's.
    "DNS_RESOLVERS": "",
    # mailings: outbox's public base URL (https://outbox.example.com); set, each
    # mailing's mail carries List-Unsubscribe to its one-click page. Needs one SECRET_KEY
    # for the web app and the workers, which sign the links.
    "UNSUBSCRIBE_URL": None,  # URL
    "SMTP_TIMEOUT": 30.0,  # seconds one SMTP socket operation may take
    "POLL_INTERVAL": 20.0,  # seconds between worker ticks
    "BATCH_SIZE": 100,  # messages claimed at a time
    # Outcomes written per commit: a worker that dies sends at most this many again.
    "RECORD_EVERY": 100,  # messages (one write per default batch; 20 cost a third more CPU)
    "RECORD_AFTER": 1.0,  # seconds an outcome may wait for its group (status.Lease)
    "RETRY_DELAY": 60.0,  # seconds before the first retry
    "RETRY_BACKOFF": 2.0,  # factor per further attempt; 1 means a fixed delay
    "RETRY_MAX_DELAY": 3600.0,  # seconds, the longest wait between two attempts
    "MAX_ATTEMPTS": 10,  # attempts before a message fails for good
    "LOCK_TIMEOUT": 900.0,  # seconds after which a claim counts as abandoned
    "MAX_MESSAGE_BYTES": 25 * 1024 * 1024,  # bytes, the largest request or message
    # The pages count each status live up to 1,000; past that they show the full count a
    # worker made at most this long ago (one worker of many counts, whichever comes first).
    "COUNT_INTERVAL": 60.0,  # seconds
    "TRUST_PROXY": False,  # behind one reverse proxy: trust its X-Forwarded-For/-Proto
    # How long a process takes a token it found live without asking the database again:
    # a revoked token keeps working that long in the processes that saw it lately.
    "TOKEN_CACHE_SECONDS": 5.0,  # seconds; 0 asks the database on every request
    # --- suppression ---
    # A recipient on the suppression list: "mark" stores it as suppressed, never sent to
    # (the message fails if no one is left); "reject" answers the API with 422, storing nothing.
    "SUPPRESSED": "mark",  # mark or reject
    # --- metrics ---
    # /readyz answers 503 unless a worker beat within two POLL_INTERVALs.
    "READY_NEEDS_WORKER": False,  # bool
    # The bearer token /metrics asks for; None: /metrics answers 404 (not served).
    "METRICS_TOKEN": None,  # str, a long random secret
    # How the worker and the demo log to stderr: "text" lines, or "json", one object a line.
    "LOG_FORMAT": "text",  # text or json
    # Special-use domains (RFC 6761: local, test, onion, ...) whose addresses are taken
    # as any other's, for mail inside a company (ann@host.local); all are refused by
    # default. OUTBOX_ALLOWED_SPECIAL_DOMAINS=local,internal; here a set of names.
    "ALLOWED_SPECIAL_DOMAINS": frozenset(),  # domain names, lower case, no leading dot
    # Settled messages (sent, failed, cancelled) and their attempts and attachments are
    # removed this long after they settled, and their bodies and attachments dropped
    # after RETENTION_BODY_DAYS (outbox.retention); 0 keeps them for good.
    "RETENTION_DAYS": 90,  # days
    "RETENTION_BODY_DAYS": 30,  # days, at most RETENTION_DAYS
    # The audit trail's events are removed this long after they happened; 0 keeps them.
    "AUDIT_RETENTION_DAYS": 365,  # days
    # --- bounces ---
    "BOUNCE_ADDRESS": None,  # address; set, each recipient's envelope sender is its VERP form
    "BOUNCE_MAX_BYTES": 10 * 1024 * 1024,  # bytes, the largest bounce mail taken in
    "BOUNCE_IMAP_URL": None,  # imaps://user:pass@host[:port]/FOLDER polled by the workers
    "BOUNCE_IMAP_CA_FILE": None,  # path of a PEM file of CAs trusted besides the system's
    "BOUNCE_IMAP_INTERVAL": 60.0,  # seconds between polls of the mailbox
    "BOUNCE_IMAP_DONE": "outbox-done",  # folder handled mails move to; "" deletes them
    "BOUNCE_IMAP_ALLOW_PLAINTEXT": False,  # bool: take imap:// (no TLS), with a warning
    # `outbox bounces --listen` is open to anyone: connections at once, in all and from one
    # client (an IPv4 address or an IPv6 /64), and what one client may send a minute.
    "BOUNCE_MAX_CONNECTIONS": 100,  # connections
    "BOUNCE_MAX_CLIENT_CONNECTIONS": 10,  # connections
    "BOUNCE_CLIENT_MAILS": 120,  # mails a minute from one client
    "BOUNCE_CLIENT_BYTES": 10 * 1024 * 1024,  # bytes a minute, at least BOUNCE_MAX_BYTES
    # --- webhooks ---
    "WEBHOOK_TIMEOUT": 10.0,  # seconds a delivery may take, connecting to the last byte read
    "WEBHOOK_INTERVAL": 5.0,  # seconds between a worker's runs of due deliveries
    # Private, loopback, link-local and reserved addresses are refused unless this says so.
    "WEBHOOK_ALLOW_PRIVATE": False,  # bool; true logs a warning at every worker start
    "WEBHOOK_CA_FILE": None,  # path of a PEM file of CAs trusted besides the system's
    # --- SMTP submission: outbox smtpd ---
    "SMTPD_TLS_CERT": None,  # path of the PEM certificate (chain) STARTTLS offers
    "SMTPD_TLS_KEY": None,  # path of its PEM private key
    # AUTH without TLS first (the token crosses the network readable); for loopback only.
    "SMTPD_ALLOW_PLAINTEXT_AUTH": False,  # bool; true logs a warning when smtpd starts
    # Connections at once, in all and from one client (an IPv4 address or an IPv6 /64):
    # past either the client gets 421 4.7.0. smtpd raises its open-file limit to fit.
    "SMTPD_MAX_CONNECTIONS": 1000,  # connections
    "SMTPD_MAX_CLIENT_CONNECTIONS": 50,  # connections
    "SMTPD_PREAUTH_TIMEOUT": 30.0,  # seconds a client may stay silent before it logs in
}

_BOOLS = {"MAIL_USE_TLS", "MAIL_USE_SSL", "TRUST_PROXY", "MAIL_TLS_VERIFY"}
_BOOLS |= {"MAIL_ALLOW_PLAINTEXT_AUTH", "READY_NEEDS_WORKER", "BOUNCE_IMAP_ALLOW_PLAINTEXT"}
_BOOLS |= {"SMTPD_ALLOW_PLAINTEXT_AUTH"}
_INTS = {"MAIL_PORT", "BATCH_SIZE", "RECORD_EVERY", "MAX_ATTEMPTS", "MAX_MESSAGE_BYTES"}
_INTS |= {"RETENTION_DAYS", "RETENTION_BODY_DAYS", "AUDIT_RETENTION_DAYS"}
_INTS |= {"BOUNCE_MAX_BYTES"}
_FLOATS = {"SMTP_TIMEOUT", "POLL_INTERVAL", "RETRY_DELAY", "RETRY_BACKOFF", "COUNT_INTERVAL"}
_FLOATS |= {"RETRY_MAX_DELAY", "LOCK_TIMEOUT", "RECORD_AFTER", "TOKEN_CACHE_SECONDS"}
_FLOATS |= {"BOUNCE_IMAP_INTERVAL"}
_BOOLS |= {"WEBHOOK_ALLOW_PRIVATE"}
_FLOATS |= {"WEBHOOK_TIMEOUT", "WEBHOOK_INTERVAL"}
_INTS |= {"MAIL_MAX_CONNECTIONS"}
_FLOATS |= {"DKIM_REFRESH"}
_INTS |= {"SMTPD_MAX_CONNECTIONS", "SMTPD_MAX_CLIENT_CONNECTIONS", "BOUNCE_MAX_CONNECTIONS"}
_INTS |= {"BOUNCE_MAX_CLIENT_CONNECTIONS", "BOUNCE_CLIENT_MAILS", "BOUNCE_CLIENT_BYTES"}
_FLOATS |= {"SMTPD_PREAUTH_TIMEOUT"}


def domain_names(raw: str) -> frozenset[str]:
    """Comma-separated domain names as a set: lower case, no dots around them."""
    return frozenset(name.strip().strip(".").lower() for name in raw.split(",") if name.strip())


def coerce(name: str, raw: str) -> Any:
    """Turn one environment string into the type its default has."""
    if name == "ALLOWED_SPECIAL_DOMAINS":
        return domain_names(raw)
    if name in _BOOLS:
        value = raw.strip().lower()
        if value in {"1", "true", "yes", "on"}:
            return True
        if value in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"OUTBOX_{name}: expected true or false, got {raw!r}")
    try:
        if name in _INTS:
            return int(raw)
        if name in _FLOATS:
            return float(raw)
    except ValueError:
        raise ValueError(f"OUTBOX_{name}: expected a number, got {raw!r}") from None
    return raw


def from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as OUTBOX_* variables, typed."""
    found = {}
    for name in DEFAULTS:
        raw = environ.get(f"OUTBOX_{name}")
        if raw is not None:
            found[name] = coerce(name, raw)
    return found


def check(config: Mapping[str, Any]) -> None:
    """Refuse settings that would break the queue's guarantees."""
    if config["LOCK_TIMEOUT"] < shortest_lock_timeout(config["SMTP_TIMEOUT"]):
        raise ValueError(
            "LOCK_TIMEOUT must be at least 4 x SMTP_TIMEOUT, or a send cut off at half of it "
            "could not wait out two slow replies of the SMTP server"
        )
    if config["MAIL_MAX_CONNECTIONS"] < 1:
        raise ValueError("MAIL_MAX_CONNECTIONS must be at least 1")
    if config["BATCH_SIZE"] < 1 or config["MAX_ATTEMPTS"] < 1 or config["RECORD_EVERY"] < 1:
        raise ValueError("BATCH_SIZE, MAX_ATTEMPTS and RECORD_EVERY must be at least 1")
    if config["RECORD_AFTER"] <= 0:
        raise ValueError("RECORD_AFTER must be above 0")
    if config["TOKEN_CACHE_SECONDS"] < 0:
        raise ValueError("TOKEN_CACHE_SECONDS must be 0 or more")
    if config["WEBHOOK_TIMEOUT"] <= 0 or config["WEBHOOK_INTERVAL"] <= 0:
        raise ValueError("WEBHOOK_TIMEOUT and WEBHOOK_INTERVAL must be above 0")
    keep, body = config["RETENTION_DAYS"], config["RETENTION_BODY_DAYS"]
    if keep < 0 or body < 0 or config["AUDIT_RETENTION_DAYS"] < 0:
        raise ValueError("RETENTION_DAYS, RETENTION_BODY_DAYS and AUDIT_RETENTION_DAYS are 0 "
                         "(keep for good) or more")  # fmt: skip
    if keep and (not body or body > keep):
        raise ValueError("RETENTION_BODY_DAYS must be 1 to RETENTION_DAYS when RETENTION_DAYS "
                         "is set: bodies cannot outlive their messages")  # fmt: skip
    if config["RETRY_BACKOFF"] < 1:
        raise ValueError("RETRY_BACKOFF must be 1 or more")
    if config["LOG_FORMAT"] not in logs.FORMATS:
        raise ValueError(
            f"LOG_FORMAT (OUTBOX_LOG_FORMAT) must be one of {', '.join(logs.FORMATS)}, "
            f"not {config['LOG_FORMAT']!r}"
        )
    allowed = config["ALLOWED_SPECIAL_DOMAINS"]
    if isinstance(allowed, str) or any(not isinstance(d, str) or d not in domain_names(d)
                                       for d in allowed):  # fmt: skip
        raise ValueError("ALLOWED_SPECIAL_DOMAINS is a set of domain names in lower case, "
                         "without dots around them, such as {'local'}")  # fmt: skip
    if config["SUPPRESSED"] not in ("mark", "reject"):
        raise ValueError("SUPPRESSED (OUTBOX_SUPPRESSED) must be mark or reject")
    if config["MAIL_USE_TLS"] and config["MAIL_USE_SSL"]:
        raise ValueError("MAIL_USE_TLS (STARTTLS) and MAIL_USE_SSL (implicit TLS): set one")
    bounce_settings.check(config)
    admission.check(config)
    if config["MAIL_TLS_CA_FILE"]:  # loaded now, once: connections use what it held
        try:
            smtp.tls_context(config["MAIL_TLS_VERIFY"], config["MAIL_TLS_CA_FILE"])
        except smtp.SettingsError as exc:
            raise ValueError(str(exc)) from None
