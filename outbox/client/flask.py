"""Flask-Mail's drop-in: `mail = Outbox(app)` instead of `Mail(app)` queues mail in outbox.

Settings: OUTBOX_URL, OUTBOX_TOKEN, optionally OUTBOX_TIMEOUT (seconds), and Flask-Mail's
own MAIL_DEFAULT_SENDER and MAIL_SUPPRESS_SEND (which, as in Flask-Mail, defaults to
TESTING: a test run queues nothing, and record_messages() still sees each message).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app
from flask_mail import Message as MailMessage
from flask_mail import email_dispatched

from outbox.client.api import Client
from outbox.client.email import STREAM_HEADER, Attachment, Email, content_id, stream_of, unnamed
from outbox.client.results import Message

# Headers outbox writes itself: the Message-ID it fixes at enqueue (set on the message
# as msgId once queued) and the Date of sending.
OWN_HEADERS = {"message-id", "date", STREAM_HEADER}


@dataclass
class State:
    """The app's outbox client, and what flask_mail.Message reads from app.extensions["mail"]."""

    client: Client
    default_sender: str | tuple[str, str] | None
    suppress: bool
    ascii_attachments: bool = False


class Outbox:
    """Flask-Mail's Mail, queuing in outbox: send(msg), send_message(...), record_messages()."""

    def __init__(self, app: Flask | None = None) -> None:
        self.app = app
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> State:
        config = app.config
        client = Client(config["OUTBOX_URL"], config["OUTBOX_TOKEN"],
                        timeout=config.get("OUTBOX_TIMEOUT", 10.0))  # fmt: skip
        state = State(client, config.get("MAIL_DEFAULT_SENDER"),
                      config.get("MAIL_SUPPRESS_SEND", app.testing))  # fmt: skip
        app.extensions["mail"] = state  # where flask_mail.Message finds the default sender
        return state

    @property
    def state(self) -> State:
        found = (self.app or current_app).extensions.get("mail")
        if not isinstance(found, State):
            raise RuntimeError("this app was not set up with outbox.client.flask.Outbox")
        return found

    def send(self, message: MailMessage) -> Message | None:
        """Queue a Flask-Mail message: the message as stored, or None when sending is
        suppressed. message.msgId becomes the Message-ID outbox sends it with."""
        state = self.state
        queued = None if state.suppress else state.client.send_email(to_email(message))
        if queued is not None:
            message.msgId = queued.message_id
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        email_dispatched.send(app, message=message)
        return queued

    def send_message(self, *args: Any, **kwargs: Any) -> Message | None:
        """send(flask_mail.Message(*args, **kwargs))."""
        return self.send(MailMessage(*args, **kwargs))

    def connect(self) -> "Connection":
        """What `with mail.connect() as conn: conn.send(msg)` (Flask-Mail's bulk) uses."""
        return Connection(self)

    @contextmanager
    def record_messages(self) -> Iterator[list[MailMessage]]:
        """The messages sent (or suppressed) while in the block, as Flask-Mail records them."""
        found: list[MailMessage] = []

        def record(app: Flask, message: MailMessage) -> None:
            found.append(message)

        with email_dispatched.connected_to(record):
            yield found


class Connection:
    """Flask-Mail's Connection: each send queues at once (the client keeps its HTTP
    connections alive between sends)."""

    def __init__(self, mail: Outbox) -> None:
        self.mail = mail

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def send(self, message: MailMessage, envelope_from: str | None = None) -> Message | None:
        """Queue message; envelope_from is not taken (outbox sets the return path)."""
        if envelope_from is not None:
            raise ValueError("outbox sets the envelope sender itself; send without envelope_from")
        return self.mail.send(message)

    def send_message(self, *args: Any, **kwargs: Any) -> Message | None:
        return self.mail.send_message(*args, **kwargs)


def to_email(message: MailMessage) -> Email:
    """A Flask-Mail message as outbox's Email; ValueError for what outbox cannot carry."""
    alts = dict(message.alts)
    html = alts.pop("html", None)
    text = message.body if message.body is not None else alts.pop("plain", None)
    if alts:
        raise ValueError(f"outbox takes a text and an html body; not {', '.join(alts)}")
    headers = {k: v for k, v in (message.extra_headers or {}).items()
               if k.lower() not in OWN_HEADERS}  # fmt: skip
    charset = message.charset or "utf-8"
    return Email(
        to=list(message.recipients), cc=list(message.cc), bcc=list(message.bcc),
        subject=message.subject, sender=message.sender, reply_to=message.reply_to,
        text=text, html=html, headers=headers,
        attachments=[_attachment(a, n, charset) for n, a in enumerate(message.attachments, 1)],
        metadata=dict(getattr(message, "metadata", None) or {}),  # msg.metadata = {...}
        # msg.stream = "broadcast", or an X-Outbox-Stream header, as outbox smtpd takes it.
        stream=stream_of(message.extra_headers or {}, getattr(message, "stream", None)),
    )  # fmt: skip


def _attachment(item: Any, number: int, charset: str) -> Attachment:
    """A flask_mail.Attachment; a Content-ID among its headers makes it an inline part of
    the HTML; its disposition and other headers are not kept (the API takes a file's
    name, type, bytes and Content-ID)."""
    data = item.data.encode(charset) if isinstance(item.data, str) else item.data
    kind = item.content_type
    if isinstance(item.data, str) and kind.startswith("text/") and "charset" not in kind:
        kind = f"{kind}; charset={charset}"
    headers = {k.lower(): v for k, v in (item.headers or {}).items()}
    cid = content_id(headers.get("content-id"))
    return Attachment(item.filename or unnamed(kind, number), data, kind, cid)
