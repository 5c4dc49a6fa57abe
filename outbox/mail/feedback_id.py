"""The Feedback-ID header on every mail outbox writes, and reading it back from a complaint.

Google's format is a:b:c:SenderId, fields of the sender's choosing that its postmaster
tools count complaints by. outbox writes `<id>:<stream>:<kind>:outbox`: for a mailing's
mail, the mailing's id and kind "mailing" (one identifier for all its mails, so the
counts reach Google's threshold); for any other, the message's own id and kind "message".
Every field is outbox's own (numbers, a stream name, a word), never an app's text, so no
field can hold a ':'.
"""

import re
from dataclasses import dataclass

SENDER_ID = "outbox"
MAILING, MESSAGE = "mailing", "message"
HEADER = re.compile(rf"^\s*([0-9]{{1,19}}):([a-z]{{1,16}}):({MAILING}|{MESSAGE}):{SENDER_ID}\s*$")


@dataclass(frozen=True)
class FeedbackId:
    """What a Feedback-ID of outbox names: a mailing or a message, by its id."""

    kind: str  # mailing or message
    pk: int
    stream: str


def value(message_pk: int, mailing_id: int | None, stream: str) -> str:
    """The header's value for one message."""
    if mailing_id is not None:
        return f"{mailing_id}:{stream}:{MAILING}:{SENDER_ID}"
    return f"{message_pk}:{stream}:{MESSAGE}:{SENDER_ID}"


def header(message_pk: int, mailing_id: int | None, stream: str) -> bytes:
    """The header line as it goes on the wire."""
    return f"Feedback-ID: {value(message_pk, mailing_id, stream)}\r\n".encode()


def read(text: str | None) -> FeedbackId | None:
    """What a Feedback-ID names, or None if it is not one outbox wrote."""
    found = HEADER.match(text or "")
    if found is None:
        return None
    return FeedbackId(found[3], int(found[1]), found[2])
