"""GET /api/messages/<id>: every address, the attachments without content, each attempt."""

import io
from datetime import timedelta

import pytest

from outbox import queue
from outbox.auth import tokens
from outbox.core.status import Status
from outbox.models import utcnow
from outbox.worker import Tally, Worker
from tests.support import outcomes
from tests.support.api import MESSAGES, RETRY, VALID, auth
from tests.support.pages import move_to
from tests.support.rows import fresh

NOTES_TYPE = "text/plain; charset=utf-8"


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


@pytest.mark.all_databases
def test_the_detail_shows_addresses_attachments_and_each_attempt(client, token):
    form = {**VALID, "cc": ["Cy <cy@example.com>", "dee@example.com"], "bcc": "hidden@example.com",
            "reply_to": "Help Desk <help@example.com>",
            "attachments": [(io.BytesIO(b"%PDF-1.4 x"), "invoice.pdf"),
                            (io.BytesIO("Grüße\n".encode()), "notes.txt", NOTES_TYPE)]}  # fmt: skip
    message_id = client.post(MESSAGES, data=form, headers=auth(token)).get_json()["id"]
    now = utcnow()
    (claim,) = queue.claim_batch("w1", 10, now)
    outcomes.deferred(claim, now + timedelta(seconds=2), 451, "451 4.7.1 try later", RETRY)
    later = fresh(message_id).next_attempt_at
    (claim,) = queue.claim_batch("w1", 10, later)
    outcomes.failed(claim, later + timedelta(seconds=1), 550, "550 5.1.1 no such user")

    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    assert shown["cc"] == ["Cy <cy@example.com>", "dee@example.com"]
    assert shown["bcc"] == ["hidden@example.com"]
    assert shown["reply_to"] == "Help Desk <help@example.com>"
    assert shown["attachments"] == [
        {
            "filename": "invoice.pdf",
            "content_type": "application/pdf",
            "size": 10,
            "content_id": None,
        },
        {
            "filename": "notes.txt",
            "content_type": NOTES_TYPE,
            "size": 8,  # ü and ß: 2 bytes
            "content_id": None,
        },
    ]
    assert [(a["outcome"], a["smtp_code"], a["error"]) for a in shown["attempt_log"]] == [
        ("deferred", 451, "451 4.7.1 try later"),
        ("failed", 550, "550 5.1.1 no such user"),
    ]
    first, second = shown["attempt_log"]
    assert first["started_at"] <= first["finished_at"] <= second["started_at"]
    assert first["finished_at"].endswith("Z")
    assert shown["status"] == "failed" and shown["next_attempt_at"] is None
    kinds = [(r["kind"], r["address"]) for r in shown["recipients"]]
    assert kinds == [("to", "rcpt@example.com"), ("cc", "cy@example.com"),
                     ("cc", "dee@example.com"), ("bcc", "hidden@example.com")]  # fmt: skip
    assert "text" not in shown and "html" not in shown  # no bodies either


@pytest.mark.parametrize("status", list(Status))
def test_next_attempt_at_is_shown_only_while_a_message_waits(client, token, make_message, status):
    message_id = move_to(make_message(), status)
    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    waiting = status in (Status.QUEUED, Status.DEFERRED)
    assert (shown["next_attempt_at"] is not None) == waiting


def test_an_accepted_attempt_shows_the_servers_words_at_the_final_dot(smtp_app, smtp, token):
    client = smtp_app.test_client()
    smtp.recorder.data_reply = "250 2.0.0 Ok: queued as 4Xk2p"
    message_id = client.post(MESSAGES, data=VALID, headers=auth(token)).get_json()["id"]
    assert Worker().drain() == Tally(sent=1)
    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    ((attempt),) = shown["attempt_log"]
    assert (attempt["outcome"], attempt["smtp_code"], attempt["error"]) == ("sent", 250, None)
    assert attempt["reply"] == "2.0.0 Ok: queued as 4Xk2p"
