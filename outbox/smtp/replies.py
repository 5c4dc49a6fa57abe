"""Sorting SMTP replies and errors: what an attempt came to, for the message and each recipient."""

import smtplib
from dataclasses import dataclass, field

from flask import current_app

from outbox.core.deliveries import Reply
from outbox.core.status import Outcome


@dataclass(frozen=True)
class Result:
    """What one delivery attempt came to: for the message, and for each recipient it tried."""

    outcome: Outcome  # SENT if any recipient was accepted
    code: int | None = None
    error: str | None = None
    recipients: dict[str, Reply] = field(default_factory=dict)  # by stored address
    # The server's or the settings' fault, not the message's (an unreachable server,
    # authentication, TLS): the rest of the batch would meet it too.
    fault: bool = False
    reply: str | None = None  # the server's words when it took the mail at the final dot


def decoded(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


# A reply that says the fault is the server's or outbox's settings, not the message's:
# authentication required (RFC 4954), or the service closing at once.
FAULT_CODES = frozenset({530, 534, 535, 538})


def classify(exc: BaseException, where: str | None = None) -> Result:
    """Sort a sending error: 4xx, timeouts and lost connections defer; 5xx fails.

    where: the server's host:port, as a fault names it (default: OUTBOX_MAIL_SERVER's).
    """
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        replies = {addr: refusal(code, reply) for addr, (code, reply) in exc.recipients.items()}
        transient = any(r.outcome is Outcome.DEFERRED for r in replies.values())
        codes = [code for code, _ in exc.recipients.values()]
        code = min(codes) if transient else max(codes)
        said = "; ".join(f"{addr}: {r.code} {r.text}" for addr, r in replies.items())
        outcome = Outcome.DEFERRED if transient else Outcome.FAILED
        return Result(outcome, code, f"all recipients refused: {said}")
    if isinstance(exc, smtplib.SMTPResponseException):
        code = exc.smtp_code
        text = f"{code} {decoded(exc.smtp_error)}"
        outcome = Outcome.FAILED if 500 <= code < 600 else Outcome.DEFERRED
        if code in FAULT_CODES:
            return Result(Outcome.DEFERRED, code, f"{text} at {where or server()}", fault=True)
        return Result(outcome, code, text)
    if isinstance(exc, TimeoutError):
        return Result(Outcome.DEFERRED, None, f"SMTP server timed out: {exc}")
    if isinstance(exc, smtplib.SMTPServerDisconnected | OSError):
        return Result(Outcome.DEFERRED, None, f"{type(exc).__name__}: {exc}")
    return Result(Outcome.FAILED, None, f"unexpected error: {type(exc).__name__}: {exc}")


def refusal(code: int, reply: bytes | str) -> Reply:
    """What a refused RCPT means for its recipient.

    A 552 there means too many recipients as often as a full mailbox, and RFC 5321
    4.5.3.1.10 says to take it as the 452 it should have been.
    """
    failed = code >= 500 and code != 552
    return Reply(Outcome.FAILED if failed else Outcome.DEFERRED, code, decoded(reply))


def server() -> str:
    """The SMTP server's host:port, as the errors name it."""
    state = current_app.extensions["mail"]
    return f"{state.server}:{state.port}"
