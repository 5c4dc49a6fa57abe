"""The suppression list's events reach the webhooks: a recipient suppressed at enqueue or by
a refusal, and a message failed for it."""

import json

import pytest
import sqlalchemy as sa

from outbox.capabilities import suppression
from outbox.capabilities.webhooks import endpoints
from outbox.models import WebhookDelivery
from outbox.models.db import db
from outbox.worker import Worker

A, B = "a@example.com", "b@example.com"


def told() -> list[tuple[str, dict]]:
    db.session.expire_all()
    rows = db.session.scalars(sa.select(WebhookDelivery).order_by(WebhookDelivery.id))
    return [(d.kind, json.loads(d.payload)["data"]) for d in rows]


@pytest.fixture
def hooked(smtp_app):  # type: ignore[no-untyped-def]
    smtp_app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    endpoints.add("http://127.0.0.1:9/hook", ["recipient.suppressed", "message.failed"])
    return smtp_app


@pytest.mark.all_databases
def test_a_recipient_suppressed_at_enqueue_is_told_with_the_reason(hooked, make_message):
    suppression.add(B, "complaint", "manual")
    db.session.commit()
    partly = make_message(to=[A, B])
    alone = make_message(to=[B])
    found = told()
    assert [(kind, data["id"], data["recipient"]) for kind, data in found] == [
        ("recipient.suppressed", partly.id, B),
        ("recipient.suppressed", alone.id, B),
        ("message.failed", alone.id, None),
    ]
    assert found[0][1]["text"] == "on the suppression list (manual): complaint"
    assert found[0][1]["message_id"] == partly.message_id


@pytest.mark.all_databases
def test_a_refusal_as_unknown_is_told_once_with_the_smtp_code(hooked, smtp, make_message):
    smtp.recorder.rcpt_replies[B] = "550 5.1.1 no such user"
    message = make_message(to=[A, B])
    Worker().drain()
    suppressed = [(k, d) for k, d in told() if k == "recipient.suppressed"]
    assert [(d["id"], d["recipient"], d["code"]) for _, d in suppressed] == [(message.id, B, 550)]
    assert suppressed[0][1]["text"] == "550 5.1.1 no such user"
