"""Resending a cancelled message that never reached its send_after waits for it, not sends now."""

from datetime import timedelta

import pytest
from sqlalchemy import update

from outbox import queue
from outbox.auth import tokens
from outbox.core.status import Status
from outbox.models import Message, utcnow
from outbox.models.db import db
from tests.support.api import MESSAGES, VALID, auth, post
from tests.support.rows import fresh


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def later(days: int = 30) -> str:
    return (utcnow() + timedelta(days=days)).replace(microsecond=0).isoformat() + "Z"


@pytest.mark.all_databases
def test_a_cancelled_future_message_resent_waits_for_its_send_after(client, token):
    send_after = later()
    message_id = post(client, token, {**VALID, "send_after": send_after}).get_json()["id"]
    cancelled = client.post(f"{MESSAGES}/{message_id}/cancel", headers=auth(token)).get_json()
    assert cancelled["status"] == "cancelled" and cancelled["next_attempt_at"] is None
    assert cancelled["note"] is None
    response = client.post(f"{MESSAGES}/{message_id}/resend", headers=auth(token))
    assert response.status_code == 200
    answer = response.get_json()
    assert answer["status"] == "queued"
    assert answer["next_attempt_at"] == answer["send_after"] == send_after
    assert answer["note"] == f"waits for send_after {send_after}"
    assert fresh(message_id).next_attempt_at == fresh(message_id).send_after
    assert not queue.has_due()
    assert queue.claim_batch("w1", 10) == []
    due = fresh(message_id).send_after + timedelta(seconds=1)
    assert [c.id for c in queue.claim_batch("w1", 10, due)] == [message_id]


@pytest.mark.all_databases
def test_a_cancelled_message_whose_send_after_passed_is_due_at_once(client, token, make_message):
    now = utcnow()
    message = make_message(send_after=now - timedelta(minutes=5), now=now - timedelta(hours=1))
    queue.cancel(message.id)
    answer = client.post(f"{MESSAGES}/{message.id}/resend", headers=auth(token)).get_json()
    assert answer["status"] == "queued" and answer["note"] is None
    assert fresh(message.id).next_attempt_at >= now
    assert queue.has_due(utcnow() + timedelta(seconds=1))


def test_the_pages_resend_button_takes_the_same_move(app, signed_in, make_message):
    app.config["WTF_CSRF_ENABLED"] = False
    send_after = (utcnow() + timedelta(days=3)).replace(microsecond=0)
    message = make_message(send_after=send_after)
    queue.cancel(message.id)
    response = signed_in.post(f"/messages/{message.id}/resend")
    assert response.status_code in (200, 302, 303)
    row = fresh(message.id)
    assert (row.status, row.next_attempt_at) == (Status.QUEUED, send_after)
    page = signed_in.get(f"/messages/{message.id}").get_data(as_text=True)
    assert "(waits for its Send after time)" in page
    queue.cancel(message.id)  # resent once its time has passed: no such note
    db.session.execute(update(Message).where(Message.id == message.id)
                       .values(send_after=utcnow() - timedelta(minutes=1)))  # fmt: skip
    db.session.commit()
    signed_in.post(f"/messages/{message.id}/resend")
    assert "waits for its Send after" not in signed_in.get(f"/messages/{message.id}").text
