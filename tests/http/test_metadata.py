"""metadata: an app's own labels for a message (an order id), taken as JSON, checked,
stored, given back in the answers and in every webhook event of the message (signed, to
a real receiver), copied by Send again, never put in the mail."""

from collections.abc import Iterator

import pytest
from flask import Flask
from flask_mail import Message as MailMessage
from sqlalchemy import func, select

from outbox import queue
from outbox.auth import tokens
from outbox.capabilities.webhooks import endpoints, events, run_due
from outbox.client import Email
from outbox.client.flask import to_email
from outbox.core.drafts import build_draft
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support.api import MESSAGES, auth
from tests.support.receiver import Receiver

LABELS = {"order": "4711", "customer.id": "c-9", "note": "Grüße, ✓ " + "x" * 990}


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


@pytest.fixture
def receiver(app: Flask) -> Iterator[Receiver]:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the receiver is on loopback
    found = Receiver().start()
    endpoint, found.secret = endpoints.add(found.url, None)
    yield found
    found.stop()


def message(**fields: object) -> dict[str, object]:
    return {"from": "shop@example.com", "to": "ann@example.com", "subject": "Your order",
            "text": "Thanks", "metadata": LABELS, **fields}  # fmt: skip


def stored() -> int:
    found = db.session.scalar(select(func.count()).select_from(Message)) or 0
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_metadata_is_given_back_in_the_answers_and_every_webhook_event_never_in_the_mail(
    smtp_app, smtp, token, receiver
):
    client = smtp_app.test_client()
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    answer = client.post(MESSAGES, json=message(), headers=auth(token))
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["metadata"] == LABELS
    failed = client.post(MESSAGES, json=message(to="gone@example.com",
                                                metadata={"order": "4712"}),
                         headers=auth(token)).get_json()["id"]  # fmt: skip
    plain = client.post(MESSAGES, json=message(metadata=None), headers=auth(token)).get_json()
    assert plain["metadata"] == {}
    assert Worker().drain() == Tally(sent=2, failed=1)

    shown = client.get(f"{MESSAGES}/{answer.get_json()['id']}", headers=auth(token)).get_json()
    assert shown["metadata"] == LABELS
    listed = client.get(MESSAGES, headers=auth(token)).get_json()["messages"]
    assert sorted(m["metadata"].get("order", "") for m in listed) == ["", "4711", "4712"]
    for mail in smtp.received:
        assert b"4711" not in mail.content and b"customer" not in mail.content

    # Two sent, one failed, and the refused address put on the suppression list.
    assert run_due("test-worker").delivered == 4
    assert receiver.refused == []
    (suppressed,) = receiver.of_kind("recipient.suppressed")
    assert suppressed["data"]["metadata"] == {"order": "4712"}
    told = {e["data"]["id"]: e for e in receiver.of_kind("message.sent")}
    assert told[answer.get_json()["id"]]["data"]["metadata"] == LABELS
    assert told[plain["id"]]["data"]["metadata"] == {}
    (refused,) = receiver.of_kind("message.failed")
    assert (refused["data"]["id"], refused["data"]["metadata"]) == (failed, {"order": "4712"})


def test_an_event_emitted_outside_a_drain_reads_the_messages_metadata(app, token, receiver):
    draft = build_draft(message(), None)
    queued, _ = queue.enqueue(draft, source="api:shop", max_attempts=3)
    events.emit(events.BOUNCED, message_pk=queued.id, message_id=queued.message_id,
                recipient="ann@example.com", code="5.1.1", text="bounced")  # fmt: skip
    events.emit(events.BOUNCED, message_pk=queued.id + 1000, message_id="<gone@x>")
    db.session.commit()
    assert run_due("test-worker").delivered == 2
    found = {e["data"]["id"]: e["data"]["metadata"] for e in receiver.of_kind("recipient.bounced")}
    assert found == {queued.id: LABELS, queued.id + 1000: {}}


@pytest.mark.all_databases
def test_a_batch_stores_each_messages_metadata_and_send_again_copies_it(smtp_app, smtp, token):
    client = smtp_app.test_client()
    batch = {"messages": [message(metadata={"order": str(n)}) for n in range(3)]}
    answer = client.post(f"{MESSAGES}/batch", json=batch, headers=auth(token))
    assert answer.status_code == 201, answer.get_json()
    ids = [m["id"] for m in answer.get_json()["messages"]]
    assert Worker().drain() == Tally(sent=3)
    copy = queue.send_again(ids[1], "staff:test", 3)
    assert copy.meta == {"order": "1"}
    shown = client.get(f"{MESSAGES}/{copy.id}", headers=auth(token)).get_json()
    assert shown["metadata"] == {"order": "1"}


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ("order=1", "must be an object of keys to strings"),
        ({"order": 4711}, "the value of order must be a string"),
        ({"order id": "1"}, "'order id' is not a key"),
        ({"k" * 41: "1"}, "is not a key"),
        ({"": "1"}, "is not a key"),
        ({"note": "x" * 1001}, "longer than 1000 characters"),
        ({f"k{n}": "v" for n in range(21)}, "holds 21 keys; at most 20"),
        ({"note": "a\x00b"}, "NUL"),
    ],
)
def test_bad_metadata_is_refused_naming_it_and_nothing_is_stored(client, token, metadata, problem):
    answer = client.post(MESSAGES, json=message(metadata=metadata), headers=auth(token))
    assert answer.status_code == 422
    assert problem in answer.get_json()["errors"]["metadata"]
    assert stored() == 0


def test_a_form_cannot_carry_metadata(client, token):
    form = {"to": "ann@example.com", "text": "hi", "metadata": '{"order": "1"}'}
    answer = client.post(MESSAGES, data=form, headers=auth(token))
    assert answer.status_code == 422
    assert "must be an object" in answer.get_json()["errors"]["metadata"]


def test_the_same_key_with_other_metadata_is_another_message(client, token):
    headers = {**auth(token), "Idempotency-Key": "order-4711"}
    first = client.post(MESSAGES, json=message(), headers=headers)
    again = client.post(MESSAGES, json=message(), headers=headers)
    other = client.post(MESSAGES, json=message(metadata={"order": "1"}), headers=headers)
    assert (first.status_code, again.status_code, other.status_code) == (201, 201, 409)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert stored() == 1


def test_the_client_and_flask_mail_hand_metadata_over():
    assert Email(to="a@example.com", metadata={"order": "1"}).to_json()["metadata"] == {
        "order": "1"
    }
    assert "metadata" not in Email(to="a@example.com").to_json()
    mail = MailMessage("Hi", sender="shop@example.com", recipients=["a@example.com"], body="x")
    mail.metadata = {"order": "2"}  # type: ignore[attr-defined]
    assert to_email(mail).to_json()["metadata"] == {"order": "2"}


def test_the_message_page_lists_the_metadata(client, token, signed_in):
    sent = client.post(MESSAGES, json=message(metadata={"order": "4711", "x": "<b>"}),
                       headers=auth(token)).get_json()["id"]  # fmt: skip
    page = signed_in.get(f"/messages/{sent}").get_data(as_text=True)
    assert "<dt>Metadata</dt><dd><code>order</code> 4711; <code>x</code> &lt;b&gt;</dd>" in page
