"""What the mailing tests share: a token, posting a mailing, reading its rows."""

import json
from typing import Any

from sqlalchemy import func, select

from outbox.models import Mailing, Message
from outbox.models.db import db

MAILINGS = "/api/mailings"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body(recipients: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    """A mailing request, recipients last (as a client streaming them sends them)."""
    found: dict[str, Any] = {
        "from": "News <news@example.com>",
        "subject": "Hello {{ first }}",
        "text": "Dear {{ first }}, your plan is {{ plan }}.",
    }
    found.update(fields)
    found["recipients"] = recipients if recipients is not None else [
        {"email": "ann@example.com", "name": "Ann", "fields": {"first": "Ann", "plan": "gold"}},
        {"email": "bob@example.net", "fields": {"first": "Bob", "plan": "tin"}},
    ]  # fmt: skip
    return found


def post(client, token: str, payload: Any, path: str = MAILINGS, **headers: str):  # type: ignore[no-untyped-def]
    """POST raw JSON bytes (in the order given) as a client streams them."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post(path, data=data, content_type="application/json",
                       headers={**auth(token), **headers})  # fmt: skip


def rows_of(mailing_id: int) -> list[Message]:
    stmt = select(Message).where(Message.mailing_id == mailing_id).order_by(Message.id)
    found = list(db.session.scalars(stmt))
    db.session.commit()
    return found


def counts() -> tuple[int, int]:
    """Mailings and messages stored."""
    found = (db.session.scalar(select(func.count()).select_from(Mailing)) or 0,
             db.session.scalar(select(func.count()).select_from(Message)) or 0)  # fmt: skip
    db.session.commit()
    return found
