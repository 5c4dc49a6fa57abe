"""Who may submit mail over SMTP: a live API token with the send scope, under its own name.

The user name is the token's name and the password the token, so a mail's source
(`smtp:<name>`) says which token handed it over. The check reads the token cache
(outbox.tokens), which may ask the database: it runs in a thread, never on the loop.
"""

import logging

from flask import Flask
from sqlalchemy.exc import SQLAlchemyError

from outbox.auth import tokens

log = logging.getLogger("outbox.smtpd")

SCOPE = "send"
INVALID = "535 5.7.8 Authentication credentials invalid"
NO_SCOPE = "535 5.7.8 The token may not send: it lacks the send scope"
UNAVAILABLE = "454 4.7.0 Temporary authentication failure; try again later"


def refusal(app: Flask, login: bytes, password: bytes, peer: str) -> str | None:
    """None if password is a live token named login that may send; else the reply refusing it.

    Each refusal is logged with the peer and the name given, never the password.
    """
    try:
        name, token = login.decode(), password.decode()
    except UnicodeDecodeError:
        return _refused(INVALID, peer, repr(login), "user name or token not UTF-8")
    try:
        with app.app_context():
            found = tokens.cache().find(token)
    except SQLAlchemyError as exc:
        log.error("smtpd: AUTH from %s as %r: the database cannot be reached: %s", peer, name,
                  type(exc).__name__)  # fmt: skip
        return UNAVAILABLE
    if found is None:
        return _refused(INVALID, peer, name, "no live token is that password")
    if found[0] != name:
        return _refused(INVALID, peer, name, "the token is not that user's")
    if SCOPE not in found[1]:
        return _refused(NO_SCOPE, peer, name, "the token lacks the send scope")
    log.info("smtpd: %s authenticated as %r", peer, name)
    return None


def _refused(reply: str, peer: str, name: str, why: str) -> str:
    log.warning("smtpd: AUTH refused from %s as %r: %s", peer, name, why)
    return reply
