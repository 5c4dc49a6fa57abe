"""The bounce listener's handler (`outbox bounces --listen`): bounce mails a relay forwards.

It takes mail only for BOUNCE_ADDRESS and its VERP forms (550 5.1.1 to any other
recipient), at most BOUNCE_MAX_BYTES, from a client within its connections and its
budget of mails and bytes a minute (outbox.smtp.admission: 421 4.7.0 past them), and
answers 250 only once the raw mail is stored: a database that is down gets 451, and the
relay keeps the mail and tries again. Reading the mail comes after the answer's storing;
if it fails, the mail stays in the inbox. outbox.smtp.server runs it.
"""

import asyncio
import logging
import time
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session
from flask import Flask

from outbox.capabilities.bounces import store, verp
from outbox.smtp import admission
from outbox.smtp import server as smtp_server

log = logging.getLogger("outbox.bounces")


class Handler(smtp_server.Handler):
    """aiosmtpd handler: RCPT checked against the bounce address, DATA stored, then read."""

    def __init__(self, app: Flask) -> None:
        super().__init__(admission.bounce_limits(app.config))
        self.app = app
        self.address = str(app.config["BOUNCE_ADDRESS"])
        self.secret = app.secret_key or ""

    async def handle_MAIL(  # noqa: N802 (aiosmtpd's hook names)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        spent = self.admission.may_send(admission.client_of(session.peer), time.monotonic())
        if spent:
            log.warning("bounce mail from %s refused: %s", session.peer, spent)
            return spent
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(  # noqa: N802 (aiosmtpd's hook names)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if not verp.is_bounce_address(address, self.address, self.secret):
            return "550 5.1.1 No such user here: this server takes bounces for outbox only"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        raw = envelope.original_content or b""
        client = admission.client_of(session.peer)
        if spent := self.admission.spend(client, len(raw), time.monotonic()):
            log.warning("bounce mail from %s not stored: %s", session.peer, spent)
            return spent
        loop = asyncio.get_running_loop()
        try:
            pk, new = await loop.run_in_executor(None, self._save, raw, envelope)
        except Exception:
            log.exception("a bounce mail could not be stored; the sender will retry")
            return "451 4.3.0 Could not store the mail now; try again later"
        if new:
            await loop.run_in_executor(None, self._process, pk)
        return f"250 2.0.0 Stored as bounce mail {pk}"

    def _save(self, raw: bytes, envelope: Envelope) -> tuple[int, bool]:
        with self.app.app_context():
            null = str(envelope.mail_from or "").strip("<>")  # a bounce comes from <>
            return store.save(raw, "smtp", null, envelope.rcpt_tos)

    def _process(self, pk: int) -> None:
        with self.app.app_context():
            store.process_safely(pk)


def options(app: Flask) -> dict[str, Any]:
    """The listener's settings for aiosmtpd: BOUNCE_MAX_BYTES as SIZE, SMTPUTF8 offered."""
    return {"data_size_limit": app.config["BOUNCE_MAX_BYTES"], "enable_SMTPUTF8": True}
