"""Mail handed over as it came: stored raw, byte for byte, and sent as it is.

queue_raw is what `outbox smtpd` (outbox.submission.server) calls after DATA: it checks
the mail, stores it with its envelope in one transaction and says what it was queued
as. The workers send a raw mail's bytes as they are (outbox.submission.raw), with the
same claims, retries, per-recipient states, bounces, suppression and DKIM as any other.
"""

from dataclasses import dataclass


class Refused(ValueError):
    """A mail outbox will not queue, as the SMTP reply that says why (code, RFC 3463 status)."""

    def __init__(self, code: int, status: str, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.status = status
        self.text = text

    def reply(self) -> str:
        return f"{self.code} {self.status} {self.text}"


@dataclass(frozen=True)
class Queued:
    """A stored submission: its outbox id and the Message-ID it goes out with."""

    id: int
    message_id: str


def queue_raw(sender: str, recipients: list[str], data: bytes, *, source: str) -> Queued:
    """Store one submitted mail (DATA as received, CRLF line ends, not dot-stuffed).

    sender is MAIL FROM's address, recipients RCPT TO's (the envelope: Bcc is whoever
    is not in To or Cc). Long lines and bare LFs are repaired (outbox.submission.repair).
    Raises Refused naming the problem (a malformed address, a line that cannot be
    repaired, a NUL, a broken header, over MAX_MESSAGE_BYTES) with nothing
    stored; a database error (sqlalchemy.exc.DBAPIError) as it is, nothing stored.
    Needs an app context.
    """
    from outbox.capabilities.submission.store import queue_raw as store

    return store(sender, recipients, data, source=source)
