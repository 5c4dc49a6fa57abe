"""Configuration defaults and the OUTBOX_* environment variables that override them."""

from collections.abc import Mapping
from typing import Any

from outbox import smtp
from outbox.capabilities.bounces import settings as bounce_settings
from outbox.core import logs
from outbox.core.status import shortest_lock_timeout
from outbox.smtp import admission

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
    # A TOML or JSON file of SMTP routes, rules and per-domain limits (docs: operating/routes.md);
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

# What each setting does: the settings reference of the docs is made from these, the
# defaults and the types (docs/hooks/reference.py).
DESCRIPTIONS: dict[str, str] = {
    "DATABASE_URL": "any SQLAlchemy URL; none: the SQLite file `instance/outbox.sqlite3`",
    "SECRET_KEY": (
        "signs sessions; give every web process the same one; none: a random key, kept in "
        "`instance/secret_key`"
    ),
    "MAIL_SERVER": "SMTP host",
    "MAIL_PORT": "SMTP port",
    "MAIL_USE_TLS": (
        "STARTTLS after connecting (port 587); a server that does not offer it gets nothing"
    ),
    "MAIL_USE_SSL": "TLS from the first byte (port 465); not together with `MAIL_USE_TLS`",
    "MAIL_USERNAME": (
        "SMTP AUTH user (CRAM-MD5, PLAIN or LOGIN; UTF-8 is fine), used when it and "
        "`MAIL_PASSWORD` are set, and only over TLS"
    ),
    "MAIL_PASSWORD": (
        "SMTP AUTH password (UTF-8 is fine), used when it and `MAIL_USERNAME` are set, "
        "and only over TLS"
    ),
    "MAIL_TLS_VERIFY": (
        "check the server's certificate and host name (`MAIL_SERVER`) against the "
        "system's trust store; `false` is the only way to stop that, and every worker "
        "start then logs a warning"
    ),
    "MAIL_TLS_CA_FILE": (
        "PEM file of CAs trusted besides the system's (a private CA); read at start, an "
        "unusable file stops it"
    ),
    "MAIL_ALLOW_PLAINTEXT_AUTH": (
        "let the password go over a connection without TLS; every worker start then logs a warning"
    ),
    "MAIL_DEFAULT_SENDER": "From address of messages that name none; without it `from` is required",
    "MAIL_MAX_CONNECTIONS": (
        "SMTP connections each worker process keeps busy at once through the "
        "`OUTBOX_MAIL_*` server (a thread each; see Several connections per process). A "
        "relay a round trip of 50 ms away takes about 20 mails a second over one "
        "connection"
    ),
    "ROUTES": (
        "a TOML or JSON file of SMTP routes, rules and per-domain limits (a relative path "
        "is taken in `instance/`; see Routes); without it, one route from the "
        "`OUTBOX_MAIL_*` settings"
    ),
    "DKIM_REFRESH": (
        "seconds between each process's rereads of the DKIM keys (`outbox dkim`): a key "
        "added or removed is used or dropped within this time (see DKIM)"
    ),
    "DNS_RESOLVERS": (
        "DNS servers `outbox dkim check` asks, `host[:port]` comma-separated, IPv6 as "
        "`[addr]:port`; empty: the system's"
    ),
    "UNSUBSCRIBE_URL": (
        "outbox's public base URL (`https://outbox.example.com`): mailing mails carry "
        "`List-Unsubscribe` to its one-click page (see Mailings)"
    ),
    "SMTP_TIMEOUT": "seconds one SMTP socket operation may take before the attempt is deferred",
    "POLL_INTERVAL": "seconds between worker ticks; each tick drains every due message",
    "BATCH_SIZE": (
        "messages a worker claims at a time; with several connections, each sending "
        "thread claims its share (at least 20)"
    ),
    "RECORD_EVERY": (
        "outcomes written per commit; a worker that dies sends at most this many messages "
        "again, and no more than it sent in its last `RECORD_AFTER`"
    ),
    "RECORD_AFTER": (
        "seconds an outcome may wait for the rest of its group (at most `LOCK_TIMEOUT / 8`)"
    ),
    "RETRY_DELAY": "seconds before the first retry",
    "RETRY_BACKOFF": "factor applied per further attempt; `1` means a fixed delay",
    "RETRY_MAX_DELAY": "seconds, the longest wait between attempts",
    "MAX_ATTEMPTS": "attempts before a message fails for good",
    "LOCK_TIMEOUT": (
        "seconds after which a claim counts as abandoned by a dead worker; at least 4 x "
        "`SMTP_TIMEOUT`"
    ),
    "MAX_MESSAGE_BYTES": (
        "the largest request body, and the largest total of bodies and attachments"
    ),
    "COUNT_INTERVAL": (
        "seconds between full counts of the messages per status, shown by the pages past "
        "1,000; each worker offers to count this often (give or take a quarter) and the "
        "first whose turn comes does"
    ),
    "TRUST_PROXY": (
        "behind one reverse proxy: take the client address and scheme from its "
        "`X-Forwarded-For` and `X-Forwarded-Proto`"
    ),
    "TOKEN_CACHE_SECONDS": (
        "seconds an API process keeps a token it found live before asking the database "
        "again; a token revoked from another process (`outbox revoke-token`) keeps "
        "working up to that long in the web processes that used it lately. `0` asks on "
        "every request"
    ),
    "SUPPRESSED": (
        "a recipient on the suppression list: `mark` stores it as `suppressed`, never "
        "sent to (the message fails if no one is left); `reject` refuses the message with "
        "`422` naming the address (see Suppression list)"
    ),
    "READY_NEEDS_WORKER": (
        "`/readyz` answers `503` unless a worker beat within two `POLL_INTERVAL`s"
    ),
    "METRICS_TOKEN": (
        "the bearer token `/metrics` asks for; unset, `/metrics` answers `404`. "
        "`PROMETHEUS_MULTIPROC_DIR` (no `OUTBOX_` prefix: prometheus-client's own) makes "
        "it add up every process's counts (see Metrics and health)"
    ),
    "LOG_FORMAT": (
        "how `outbox worker`, `send-queued` and `demo` log to stderr: `text` lines, or "
        "`json`: one object a line with `time` (UTC), `level`, `logger`, `message`, "
        "`exception` when there is one, and fields such as `worker_id`. Any other value "
        "stops the process at start"
    ),
    "ALLOWED_SPECIAL_DOMAINS": (
        "special-use domains whose addresses are taken like any other, comma-separated: "
        "`local,internal` takes `ann@host.local`. Without it, addresses in `.local`, "
        "`.test`, `.onion`, `.invalid`, `.arpa` and `localhost` subdomains are refused "
        "(email-validator's special-use list), by the API and the compose page alike. In "
        '`instance/config.py`, `ALLOWED_SPECIAL_DOMAINS = {"local"}`'
    ),
    "RETENTION_DAYS": (
        "days after settling (sent, failed, cancelled) that a message goes with its "
        "attempts and attachments; `0` keeps messages for good (see Retention)"
    ),
    "RETENTION_BODY_DAYS": (
        "days after settling that a message's bodies and attachments are dropped (the row "
        "stays, marked); at most `OUTBOX_RETENTION_DAYS`; `0` keeps them"
    ),
    "AUDIT_RETENTION_DAYS": (
        "days the audit trail's events are kept before the purge removes them; `0` keeps "
        "them for good"
    ),
    "BOUNCE_ADDRESS": (
        "the address bounces come back to; set, every recipient's envelope sender is its "
        "VERP form (see Bounces)"
    ),
    "BOUNCE_MAX_BYTES": "the largest bounce mail `outbox bounces --listen` takes (`552` past it)",
    "BOUNCE_IMAP_URL": (
        "`imaps://user:password@host[:port]/FOLDER`: a mailbox of bounces the workers poll"
    ),
    "BOUNCE_IMAP_CA_FILE": (
        "PEM file of CAs trusted besides the system's for the IMAP server's certificate"
    ),
    "BOUNCE_IMAP_INTERVAL": "seconds between polls of that mailbox (by one worker at a time)",
    "BOUNCE_IMAP_DONE": "the folder handled mails move to (made if missing); empty deletes them",
    "BOUNCE_IMAP_ALLOW_PLAINTEXT": "take an `imap://` URL (no TLS); the workers then log a warning",
    "BOUNCE_MAX_CONNECTIONS": (
        "connections `outbox bounces --listen` holds at once, in all; past it `421 4.7.0`"
    ),
    "BOUNCE_MAX_CLIENT_CONNECTIONS": (
        "connections `outbox bounces --listen` holds at once from one client (an IPv4 "
        "address, an IPv6 /64); past it `421 4.7.0`"
    ),
    "BOUNCE_CLIENT_MAILS": (
        "mails one client may send `outbox bounces --listen` a minute; past them "
        "`421 4.7.0`, the mail not stored"
    ),
    "BOUNCE_CLIENT_BYTES": (
        "bytes one client may send it a minute (at least `OUTBOX_BOUNCE_MAX_BYTES`); past "
        "them `421 4.7.0`, the mail not stored"
    ),
    "WEBHOOK_TIMEOUT": (
        "seconds one webhook request may take, connecting to the last byte read; a claim "
        "on deliveries holds 3 times this plus 5"
    ),
    "WEBHOOK_INTERVAL": "seconds between a worker's runs of due webhook deliveries",
    "WEBHOOK_ALLOW_PRIVATE": (
        "let webhooks go to private, loopback, link-local and reserved addresses; every "
        "worker start then logs a warning"
    ),
    "WEBHOOK_CA_FILE": "PEM file of CAs trusted for https webhooks besides the system's",
    "SMTPD_TLS_CERT": (
        "the PEM certificate (chain) `outbox smtpd` offers with STARTTLS; read at start: "
        "one without `SMTPD_TLS_KEY`, or a file it cannot load, stops it with the reason"
    ),
    "SMTPD_TLS_KEY": (
        "the PEM private key of `SMTPD_TLS_CERT`; read at start: one without the other, "
        "or a file it cannot load, stops it with the reason"
    ),
    "SMTPD_ALLOW_PLAINTEXT_AUTH": (
        "let `outbox smtpd` take AUTH without TLS (for a loopback address); it logs a "
        "warning at start. Without it and without a certificate it does not start"
    ),
    "SMTPD_MAX_CONNECTIONS": (
        "connections `outbox smtpd` holds at once; past it a new client gets `421 4.7.0`. "
        "It raises its soft open-file limit to this plus 100, and does not start if the "
        "hard limit is lower"
    ),
    "SMTPD_MAX_CLIENT_CONNECTIONS": (
        "connections at once from one client (an IPv4 address, an IPv6 /64); past it `421 4.7.0`"
    ),
    "SMTPD_PREAUTH_TIMEOUT": (
        "seconds a client may stay silent before it has logged in (`421 4.4.2`); after "
        "AUTH, `--timeout`"
    ),
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


def type_name(name: str) -> str:
    """The type a setting's value is read as, in a reader's words."""
    if name == "ALLOWED_SPECIAL_DOMAINS":
        return "domain names"
    if name in _BOOLS:
        return "true or false"
    if name in _INTS:
        return "integer"
    return "number" if name in _FLOATS else "text"


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
