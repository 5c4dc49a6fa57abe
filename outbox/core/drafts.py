"""A Draft: a message checked against the schema, from any source, ready to be queued."""

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask import current_app, has_app_context
from pydantic import ValidationError

from outbox.core.addresses import Mailbox
from outbox.core.checks import Upload
from outbox.core.schema import NewMessage, field_errors
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.core.streams import Stream


class DraftError(Exception):
    """One or more fields are wrong; errors maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass
class Draft:
    """A checked message, ready for queue.enqueue."""

    from_addr: Mailbox
    to: list[Mailbox]
    cc: list[Mailbox] = field(default_factory=list)
    bcc: list[Mailbox] = field(default_factory=list)
    reply_to: Mailbox | None = None
    subject: str = ""
    text: str | None = None
    html: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    stream: Stream = DEFAULT_STREAM
    send_after: datetime | None = None
    attachments: list[Upload] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)  # the app's labels, not sent

    def size(self) -> int:
        """Bytes of bodies and attachments, the part limited by MAX_MESSAGE_BYTES."""
        bodies = len((self.text or "").encode()) + len((self.html or "").encode())
        return bodies + sum(len(a.data) for a in self.attachments)

    def fingerprint(self) -> str:
        """A digest of the whole content, to tell a true repeat from a reused key."""
        digest = hashlib.sha256()
        fields = {k: v for k, v in self.__dict__.items() if k != "attachments"}
        if not fields["metadata"]:  # digests made before metadata existed stay the same
            del fields["metadata"]
        if fields["stream"] == DEFAULT_STREAM:  # and those made before streams too
            del fields["stream"]
        fields["send_after"] = self.send_after.isoformat() if self.send_after else None
        # Each address as a person writes it, as the digest has always taken them.
        for name in ("from_addr", "reply_to"):
            fields[name] = str(fields[name]) if fields[name] else None
        for name in ("to", "cc", "bcc"):
            fields[name] = [str(mailbox) for mailbox in fields[name]]
        digest.update(json.dumps(fields, sort_keys=True).encode())
        for upload in self.attachments:
            digest.update(f"\0{upload.filename}\0{upload.content_type}\0".encode())
            if upload.content_id is not None:  # inline parts: as above, older digests hold
                digest.update(f"cid:{upload.content_id}\0".encode())
            digest.update(hashlib.sha256(upload.data).digest())
        return digest.hexdigest()


def build_draft(
    fields: Mapping[str, Any],
    default_sender: str | None,
    allowed_domains: Collection[str] | None = None,
) -> Draft:
    """Check every field at once (schema.NewMessage); raise DraftError naming each bad one.

    allowed_domains are the special-use domains whose addresses are taken; None means the
    current app's ALLOWED_SPECIAL_DOMAINS, so that the API and the compose page agree.
    """
    if allowed_domains is None:
        allowed_domains = current_app.config["ALLOWED_SPECIAL_DOMAINS"] if has_app_context() else ()
    context = {"default_sender": default_sender, "allowed_domains": frozenset(allowed_domains)}
    try:
        message = NewMessage.model_validate(fields, context=context)
    except ValidationError as exc:
        raise DraftError(field_errors(exc)) from None
    return Draft(**vars(message))
