"""Django's email backend for outbox: EMAIL_BACKEND = "outbox.client.django.EmailBackend".

Settings: OUTBOX_URL, OUTBOX_TOKEN and, optionally, OUTBOX_TIMEOUT (seconds). Each
send_messages() is one batch request per BATCH_LIMIT messages, each stored all or none.
"""

import mimetypes
from collections.abc import Sequence
from email.message import Message as MIMEMessage
from email.mime.base import MIMEBase
from typing import Any

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage

from outbox.client.api import BATCH_LIMIT, Client
from outbox.client.email import STREAM_HEADER, Attachment, Email, content_id, stream_of, unnamed
from outbox.client.errors import OutboxError

# Headers Django reads from extra_headers itself (From, To, Cc, Reply-To), and those
# outbox writes itself: the Message-ID it fixes at enqueue, so that a retried send is
# the same mail, and the Date of sending.
HANDLED = {"from", "to", "cc", "reply-to", "message-id", "date", STREAM_HEADER}


class EmailBackend(BaseEmailBackend):
    """Queues Django's messages in outbox; send_messages returns how many were queued."""

    def __init__(self, fail_silently: bool = False, *, url: str | None = None,
                 token: str | None = None, timeout: float | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.url = url or settings.OUTBOX_URL
        self.token = token or settings.OUTBOX_TOKEN
        self.timeout: float = (
            getattr(settings, "OUTBOX_TIMEOUT", 10.0) if timeout is None else timeout
        )
        self.client: Client | None = None

    def open(self) -> bool:
        """Make the client (its connections are kept between requests); True if new."""
        if self.client is not None:
            return False
        self.client = Client(self.url, self.token, timeout=self.timeout)
        return True

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Queue the messages with recipients, BATCH_LIMIT a request; the number queued."""
        found = [m for m in email_messages if m.recipients()]
        if not found:
            return 0
        made = self.open()
        assert self.client is not None
        queued = 0
        try:
            for start in range(0, len(found), BATCH_LIMIT):
                chunk = found[start : start + BATCH_LIMIT]
                try:
                    queued += len(self.client.send_batch([to_email(m) for m in chunk]))
                except (OutboxError, ValueError):
                    if not self.fail_silently:
                        raise
        finally:
            if made:
                self.close()
        return queued


def to_email(message: EmailMessage) -> Email:
    """A Django message as outbox's Email; ValueError for what outbox cannot carry."""
    headers = {k: v for k, v in message.extra_headers.items() if k.lower() not in HANDLED}
    given = {k.lower(): v for k, v in message.extra_headers.items()}
    reply_to = given.get("reply-to") or ", ".join(message.reply_to) or None
    text, html = _bodies(message)
    charset = message.encoding or settings.DEFAULT_CHARSET
    return Email(
        to=message.to, cc=message.cc, bcc=message.bcc, subject=str(message.subject),
        sender=given.get("from", message.from_email), reply_to=reply_to, text=text, html=html,
        headers=headers,
        attachments=[_attachment(a, n, charset) for n, a in enumerate(message.attachments, 1)],
        # message.metadata = {...}, as django-anymail's backends take it.
        metadata=dict(getattr(message, "metadata", None) or {}),
        # message.stream = "broadcast", or an X-Outbox-Stream header, as outbox smtpd takes it.
        stream=stream_of(message.extra_headers, getattr(message, "stream", None)),
    )  # fmt: skip


def _bodies(message: EmailMessage) -> tuple[str | None, str | None]:
    """The text and html bodies: the body by its content_subtype, then the alternatives."""
    found: dict[str, str | None] = {"plain": None, "html": None}
    found["html" if message.content_subtype == "html" else "plain"] = message.body or None
    for content, mimetype in getattr(message, "alternatives", []):
        kind = mimetype.split(";")[0].strip().lower()
        if kind not in ("text/plain", "text/html"):
            raise ValueError(f"outbox takes a text and an html body; not an alternative {kind}")
        if found[kind[5:]] is not None:
            raise ValueError(f"the message has two {kind} bodies; outbox takes one of each")
        found[kind[5:]] = (
            content if isinstance(content, str) else content.decode(charset_of(mimetype))
        )
    return found["plain"], found["html"]


def charset_of(content_type: str) -> str:
    _, _, rest = content_type.partition("charset=")
    return rest.split(";")[0].strip().strip('"') or "utf-8"


def _attachment(item: Any, number: int, charset: str) -> Attachment:
    """A (filename, content, mimetype) triple or a MIMEBase part as an Attachment.

    A part's Content-ID makes it an inline part of the HTML (multipart/related, as
    Django's own backend sends an image attached with one); its other headers are not
    kept: the API takes a file's name, type, bytes and Content-ID.
    """
    if isinstance(item, MIMEBase):
        if item.is_multipart():
            raise ValueError("a multipart attachment cannot be queued; attach its parts")
        kind = item.get_content_type()
        if param := item.get_param("charset"):
            kind = f"{kind}; charset={param}"
        data = item.get_payload(decode=True)
        assert isinstance(data, bytes)  # a part that is not multipart decodes to bytes
        filename = item.get_filename() or unnamed(kind, number)
        return Attachment(filename, data, kind, content_id(item.get("Content-ID")))
    filename, content, mimetype = item
    mimetype = mimetype or mimetypes.guess_type(filename or "")[0] or "application/octet-stream"
    if isinstance(content, EmailMessage):
        content = content.message()
    if isinstance(content, MIMEMessage):
        content = content.as_bytes()
    if isinstance(content, str):
        content = content.encode(charset)
        if mimetype.startswith("text/") and "charset" not in mimetype:
            mimetype = f"{mimetype}; charset={charset}"
    return Attachment(filename or unnamed(mimetype, number), content, mimetype)
