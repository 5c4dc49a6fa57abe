"""The JSON API as the tests call it: paths, a valid message, bearer headers, rows committed."""

import base64

import sqlalchemy as sa

from outbox.core.status import Retry
from outbox.models.db import db

VALID = {"to": ["rcpt@example.com"], "subject": "Hello", "text": "Hello there"}
STORED = ("messages", "attachments", "attachment_chunks")


MESSAGES = "/api/messages"


RETRY = Retry(delay=60, backoff=2, max_delay=3600)


def auth(token: str, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def post(client, token: str, body: object = VALID, key: str | None = None):
    """A JSON message sent to the enqueue endpoint."""
    return client.post(MESSAGES, json=body, headers=auth(token, key))


def stored() -> dict[str, int]:
    """Rows per table as another connection sees them: only what was committed."""
    with db.engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in STORED}


def nothing_stored() -> bool:
    return stored() == dict.fromkeys(STORED, 0)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# A valid message as the API takes it (POST /api/messages hands a JSON body to build_draft
# as it is); each case below makes one field of it wrong.


BATCH = "/api/messages/batch"
