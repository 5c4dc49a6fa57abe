"""The schemathesis checks the API is held to, and the stored-whole check on attachments."""

import schemathesis
import sqlalchemy as sa
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from outbox.models import Attachment, AttachmentChunk, Message
from outbox.models.db import db

MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]  # fmt: skip


def stored_whole() -> list[str]:
    """Messages whose attachment rows, or attachments whose chunk bytes, do not add up."""
    problems = []
    attached = (
        sa.select(Message.id, Message.attachment_count, sa.func.count(Attachment.id))
        .outerjoin(Attachment, Attachment.message_pk == Message.id)
        .group_by(Message.id, Message.attachment_count)
    )
    for message_pk, expected, found in db.session.execute(attached):
        if expected != found:
            problems.append(f"message {message_pk}: attachment_count {expected}, {found} rows")
    chunked = (
        sa.select(
            Attachment.id,
            Attachment.size,
            sa.func.coalesce(sa.func.sum(sa.func.length(AttachmentChunk.data)), 0),
            sa.func.count(AttachmentChunk.seq),
            sa.func.coalesce(sa.func.max(AttachmentChunk.seq) + 1, 0),
        )
        .outerjoin(AttachmentChunk, AttachmentChunk.attachment_id == Attachment.id)
        .group_by(Attachment.id, Attachment.size)
    )
    for attachment_id, size, total, chunks, seqs in db.session.execute(chunked):
        if size != total or chunks != seqs:
            problems.append(f"attachment {attachment_id}: size {size}, {total} bytes in chunks")
    return problems
