"""The bounce settings, checked at start: the bounce address and the bounce mailbox's URL."""

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from outbox.capabilities.bounces import verp

PORTS = {"imaps": 993, "imap": 143}
MAX_BYTES = 16 * 1024 * 1024 - 1  # the largest bounce mail a MariaDB MEDIUMBLOB keeps


def check(config: Any) -> None:
    """ValueError naming the problem if the bounce settings cannot work."""
    verp.check(config)
    check_imap(config)
    if not 1024 <= config["BOUNCE_MAX_BYTES"] <= MAX_BYTES:  # a MEDIUMBLOB on MariaDB
        raise ValueError(f"BOUNCE_MAX_BYTES must be 1024 to {MAX_BYTES:,}")


@dataclass(frozen=True)
class Mailbox:
    """Where the bounce mails wait, as the URL names it."""

    tls: bool
    host: str
    port: int
    user: str
    password: str
    folder: str


def mailbox(url: str) -> Mailbox:
    """The parts of OUTBOX_BOUNCE_IMAP_URL; ValueError naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in PORTS:
        raise ValueError("BOUNCE_IMAP_URL must start with imaps:// (or imap:// with "
                         "BOUNCE_IMAP_ALLOW_PLAINTEXT)")  # fmt: skip
    try:
        port = parts.port or PORTS[parts.scheme]
    except ValueError:
        raise ValueError("BOUNCE_IMAP_URL: the port is not a number from 1 to 65535") from None
    if not parts.hostname or parts.username is None or parts.password is None:
        raise ValueError("BOUNCE_IMAP_URL must name the user, password and host: "
                         "imaps://user:password@host/INBOX")  # fmt: skip
    folder = unquote(parts.path.lstrip("/")) or "INBOX"
    return Mailbox(parts.scheme == "imaps", parts.hostname, port, unquote(parts.username),
                   unquote(parts.password), folder)  # fmt: skip


def check_imap(config: Any) -> None:
    """ValueError if the IMAP settings cannot work: a bad URL, plain IMAP not allowed, a bad CA."""
    if not config.get("BOUNCE_IMAP_URL"):
        return
    box = mailbox(config["BOUNCE_IMAP_URL"])
    if not box.tls and not config.get("BOUNCE_IMAP_ALLOW_PLAINTEXT"):
        raise ValueError("BOUNCE_IMAP_URL is imap:// (no TLS): the password would cross the "
                         "network in the clear. Use imaps://, or set "
                         "BOUNCE_IMAP_ALLOW_PLAINTEXT=true")  # fmt: skip
    if config["BOUNCE_IMAP_INTERVAL"] <= 0:
        raise ValueError("BOUNCE_IMAP_INTERVAL must be above 0")
    if box.tls:
        context(config)


def context(config: Any) -> ssl.SSLContext:
    """The system's trust store, and BOUNCE_IMAP_CA_FILE's CAs besides."""
    context = ssl.create_default_context()
    if config.get("BOUNCE_IMAP_CA_FILE"):
        try:
            context.load_verify_locations(cafile=config["BOUNCE_IMAP_CA_FILE"])
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"BOUNCE_IMAP_CA_FILE: cannot load {exc}") from None
    return context
