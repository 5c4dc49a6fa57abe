"""A mailing's recipient row as a mail, rendered at send time: the builder and the Send
again of mailing messages (queue.kinds; outbox.app registers prepare and send_again).

Compiled templates are kept per process, per mailing (templates.Cache, CACHE_SIZE
mailings). Attachments are kept for one mailing at a time and only up to
ATTACHMENT_CACHE_BYTES in all: a worker holds at most that much of them beside the mail
it is sending, never a batch's.
"""

import dataclasses
import io
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from flask import current_app
from sqlalchemy import select

from outbox.capabilities.dkim import keyring
from outbox.capabilities.mailings import unsubscribe
from outbox.capabilities.mailings.head import sources_of
from outbox.capabilities.mailings.templates import (
    Cache,
    Compiled,
    TemplateProblem,
    compile_templates,
    oversize,
)
from outbox.core.checks import Upload
from outbox.mail import mime
from outbox.models import Mailing, MailingAttachment, MailingAttachmentChunk, Message
from outbox.models.db import db
from outbox.queue import Damaged, draft_of, enqueue

ATTACHMENT_CACHE_BYTES = 32 * 1024 * 1024
ONE_CLICK = "List-Unsubscribe=One-Click"  # RFC 8058's List-Unsubscribe-Post value


@dataclass(frozen=True)
class Body:
    """What a mailing's recipients share: the stored mailing's values and its templates."""

    headers: dict[str, str]
    unsubscribe_url: str | None
    compiled: Compiled


_bodies = Cache()
_attachments: tuple[tuple[str, int], mime.Attachments] | None = None
_lock = threading.Lock()


def body(mailing_id: int) -> Body:
    """The mailing's shared part, compiled once per process (and database: tests run many)."""
    key = (db.engine.url.render_as_string(), mailing_id)
    found = _bodies.get(key)
    if found is None:
        mailing = db.session.get(Mailing, mailing_id)
        if mailing is None:
            raise mime.BuildError(f"mailing {mailing_id} is not stored")
        try:
            compiled = compile_templates(sources_of(mailing))
        except TemplateProblem as exc:
            raise mime.BuildError(f"mailing {mailing_id}: {exc}") from None
        found = Body(dict(mailing.headers or {}), mailing.unsubscribe_url, compiled)
        db.session.commit()
        _bodies.put(key, found)
    return found


def attachments(mailing_id: int, count: int) -> mime.Attachments:
    """The mailing's attachments, from the process's one-mailing cache or read anew."""
    global _attachments
    key = (db.engine.url.render_as_string(), mailing_id)
    with _lock:
        if _attachments is not None and _attachments[0] == key:
            return _attachments[1]
    listing = select(MailingAttachment).where(MailingAttachment.mailing_id == mailing_id)
    found = []
    for item in db.session.scalars(listing.order_by(MailingAttachment.id)).all():
        chunks = select(MailingAttachmentChunk.data).where(
            MailingAttachmentChunk.attachment_id == item.id
        )
        buffer = io.BytesIO()
        for chunk in db.session.scalars(chunks.order_by(MailingAttachmentChunk.seq)):
            buffer.write(chunk)
        data = buffer.getvalue()
        if len(data) != item.size:
            raise Damaged(f"attachment {item.filename!r} holds {len(data)} of {item.size} bytes")
        found.append(Upload(item.filename, item.content_type, data, item.content_id))
    db.session.commit()
    if len(found) != count:
        raise Damaged(f"{len(found)} of the mailing's {count} attachments are stored")
    if sum(len(upload.data) for upload in found) <= ATTACHMENT_CACHE_BYTES:
        with _lock:
            _attachments = (key, found)
    return found


def rendered(row: Any) -> tuple[dict[str, str | None], dict[str, str]]:
    """A recipient row's subject, text, html and unsubscribe URL, and its headers.

    mime.BuildError if a template fails for this recipient.
    """
    shared = body(row.mailing_id)
    entry = row.recipients[0]
    token = unsubscribe.token(row.id, entry.address)
    values = {**(row.fields or {}), "email": entry.address, "name": entry.name or ""}
    values["unsubscribe_token"] = token
    try:
        texts = shared.compiled.render(values, current_app.config["MAX_MESSAGE_BYTES"])
    except TemplateProblem as exc:
        raise mime.BuildError(f"the mailing's template failed: {exc}") from None
    headers = dict(shared.headers)
    url = texts["unsubscribe_url"] or unsubscribe.url(token, current_app.config["UNSUBSCRIBE_URL"])
    if url:
        headers.update({"List-Unsubscribe": f"<{url}>", "List-Unsubscribe-Post": ONE_CLICK})
    return texts, headers


def prepare(row: Any) -> mime.Mail:
    """The mail of a mailing's recipient row, as mime.prepare makes a message's."""
    texts, headers = rendered(row)
    found = attachments(row.mailing_id, row.attachment_count) if row.attachment_count else []
    attached = sum(len(upload.data) for upload in found)
    if problem := oversize(texts, attached, current_app.config["MAX_MESSAGE_BYTES"]):
        raise mime.BuildError(problem)
    view = SimpleNamespace(
        subject=texts["subject"] or "", text_body=texts["text"], html_body=texts["html"],
        headers=headers, recipients=row.recipients, message_id=row.message_id,
        from_addr=row.from_addr, from_name=row.from_name,
        reply_to=row.reply_to, reply_to_name=row.reply_to_name,
        id=row.id, mailing_id=row.mailing_id, stream=row.stream,
    )  # fmt: skip
    mail = mime.prepare(view, found)  # type: ignore[arg-type]
    mail.signers = keyring.signers_for(row.from_addr)
    return mail


def onto(message: Message) -> None:
    """Show a mailing's recipient row as it is sent: its subject, bodies and headers rendered
    into it, for the message page. The row leaves the session first: nothing is written."""
    if not message.mailing_id:
        return
    db.session.expunge(message)
    try:
        texts, headers = rendered(message)
    except mime.BuildError as exc:
        message.text_body = f"(this recipient's mail cannot be rendered: {exc})"
        return
    message.subject = texts["subject"] or ""
    message.text_body, message.html_body, message.headers = texts["text"], texts["html"], headers


def copied(message: Message) -> dict[str, Any]:
    """A recipient row's content as a message of its own has it (staff's "Send again"):
    subject, text, html, headers (List-Unsubscribe too) and attachments; BuildError if a
    template fails."""
    texts, headers = rendered(message)
    count = message.attachment_count
    found = attachments(message.mailing_id or 0, count) if count else []
    return {"subject": texts["subject"] or "", "text": texts["text"], "html": texts["html"],
            "headers": headers, "attachments": list(found)}  # fmt: skip


def send_again(old: Message, source: str, max_attempts: int) -> Message:
    """A sent recipient row queued again as a message of its own, its mail as rendered."""
    draft = dataclasses.replace(draft_of(old), **copied(old))
    return enqueue(draft, source=source, max_attempts=max_attempts, resent_from=old.id)[0]
