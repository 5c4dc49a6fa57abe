"""Webhooks end to end: events made in the senders' transactions, claimed and delivered
signed by the workers to a real receiver that verifies them, retried, taken back."""

from collections import deque
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy
from flask import Flask
from sqlalchemy import func, insert, select

from outbox import queue
from outbox.capabilities import retention
from outbox.capabilities.webhooks import endpoints, events, run_due, store
from outbox.core.streams import Stream
from outbox.models import Message, WebhookDelivery, WebhookEndpoint, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.receiver import Receiver


@pytest.fixture
def hooks_app(app: Flask) -> Flask:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the receiver is on loopback
    app.config["WEBHOOK_TIMEOUT"] = 3.0
    return app


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    yield found
    found.stop()


ENVELOPE = {"id", "message_id", "recipient", "code", "dsn", "text", "at", "stream", "metadata"}


def endpoint_for(receiver: Receiver, kinds: str | None = None) -> WebhookEndpoint:
    endpoint, secret = endpoints.add(receiver.url, kinds)
    receiver.secret = secret
    return endpoint


def deliveries() -> list[WebhookDelivery]:
    db.session.expire_all()
    return list(db.session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def test_emit_queues_one_delivery_per_enabled_endpoint_that_takes_the_kind(hooks_app, receiver):
    every = endpoint_for(receiver)
    sent_only = endpoint_for(receiver, "message.sent")
    off = endpoint_for(receiver)
    endpoints.disable(off.id)
    events.emit(events.FAILED, message_pk=7, message_id="<7@x>", code=550, text="no")
    events.emit(events.SENT, message_pk=8, message_id="<8@x>", recipient="a@example.com")
    db.session.commit()
    rows = deliveries()
    assert [(r.endpoint_id, r.kind) for r in rows] == [
        (every.id, "message.failed"), (every.id, "message.sent"), (sent_only.id, "message.sent")
    ]  # fmt: skip
    assert rows[1].event_id == rows[2].event_id  # one event, one webhook-id everywhere
    with pytest.raises(ValueError, match="unknown event kind 'message.lost'"):
        events.emit("message.lost", message_pk=1, message_id="<1@x>")


def test_without_an_endpoint_a_drain_writes_no_delivery(hooks_app, smtp_app, make_message):
    make_message()
    Worker().drain()
    assert deliveries() == []


@pytest.mark.all_databases
def test_a_drain_through_smtp_tells_the_receiver_of_sent_and_failed_signed(
    hooks_app, smtp_app, smtp, make_message, receiver
):
    endpoint_for(receiver, "message.sent message.failed")
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    sent, failed = make_message(), make_message(to=["gone@example.com"])
    make_message(to=["later@example.com"])  # deferred: a kind this endpoint does not take
    smtp.recorder.rcpt_replies["later@example.com"] = "450 4.2.0 try later"
    Worker().drain()
    tally = run_due("test-worker")
    assert (tally.delivered, tally.retrying) == (2, 0)
    assert receiver.refused == [] and receiver.duplicates == 0
    [told_sent] = receiver.of_kind("message.sent")
    [told_failed] = receiver.of_kind("message.failed")
    assert told_sent["data"]["id"] == sent.id
    assert told_sent["data"]["message_id"] == sent.message_id == smtp.received[0].message_id
    assert told_sent["data"]["code"] == 250
    assert told_failed["data"]["id"] == failed.id
    assert told_failed["data"]["message_id"] == failed.message_id
    assert told_failed["data"]["code"] == 550 and "no such user" in told_failed["data"]["text"]
    assert told_failed["timestamp"].endswith("Z") and told_failed["data"]["at"].endswith("Z")
    assert {d.status for d in deliveries()} == {"delivered"}


def test_a_partly_delivered_message_is_told_sent_with_the_success_code(
    hooks_app, smtp_app, smtp, make_message, receiver
):
    endpoint_for(receiver)
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    smtp.recorder.rcpt_replies["shut@example.com"] = "554 5.7.1 relay access denied"
    partly = make_message(to=["ann@example.com", "gone@example.com", "shut@example.com"])
    Worker().drain()
    assert run_due("test-worker").retrying == 0
    [told_sent] = receiver.of_kind("message.sent")
    assert (told_sent["data"]["id"], told_sent["data"]["code"]) == (partly.id, 250)
    assert "gone@example.com: 550 5.1.1 no such user" in told_sent["data"]["text"]
    refused = {e["data"]["recipient"]: e["data"] for e in receiver.of_kind("recipient.failed")}
    assert {address: (d["id"], d["code"], d["text"]) for address, d in refused.items()} == {
        "gone@example.com": (partly.id, 550, "5.1.1 no such user"),
        "shut@example.com": (partly.id, 554, "5.7.1 relay access denied"),
    }  # each refusal has its own event
    assert refused["shut@example.com"]["message_id"] == partly.message_id
    [told_gone] = receiver.of_kind("recipient.suppressed")  # unknown: suppressed besides
    assert (told_gone["data"]["recipient"], told_gone["data"]["code"]) == ("gone@example.com", 550)
    assert set(told_sent["data"]) == set(told_gone["data"]) == ENVELOPE
    assert told_sent["data"]["stream"] == told_gone["data"]["stream"] == "transactional"


def test_an_event_names_its_message_stream(hooks_app, smtp_app, smtp, make_message, receiver):
    endpoint_for(receiver)
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    news = make_message(to=["gone@example.com"], stream=Stream.BROADCAST)
    Worker().drain()
    run_due("test-worker")
    told = {e["type"]: e["data"] for e in receiver.events.values()}
    assert told["message.failed"]["id"] == told["recipient.suppressed"]["id"] == news.id
    assert told["message.failed"]["stream"] == told["recipient.suppressed"]["stream"] == "broadcast"


def test_a_receiver_down_for_a_while_gets_the_event_once_it_is_back(hooks_app, receiver):
    endpoint_for(receiver)
    receiver.stop()
    events.emit(events.SENT, message_pk=1, message_id="<1@x>")
    db.session.commit()
    t0 = utcnow()
    run_due("w", now=t0)
    [row] = deliveries()
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.error == f"connection refused by 127.0.0.1:{receiver.port}"
    assert row.next_attempt_at == t0 + timedelta(seconds=5)
    assert run_due("w", now=t0 + timedelta(seconds=4)).retrying == 0  # not due yet
    receiver.answers = deque([500])
    receiver.start()
    run_due("w", now=t0 + timedelta(seconds=6))
    [row] = deliveries()
    assert (row.status, row.attempts, row.response_code) == ("pending", 2, 500)
    assert run_due("w", now=t0 + timedelta(seconds=6 + 300)).delivered == 1
    [row] = deliveries()
    assert (row.status, row.attempts, row.response_code) == ("delivered", 3, 204)
    assert len(receiver.events) == 1 and receiver.duplicates == 0


def test_after_the_last_retry_the_delivery_fails_and_the_endpoint_is_disabled(hooks_app, receiver):
    endpoint = endpoint_for(receiver)
    receiver.stop()
    events.emit(events.SENT, message_pk=1, message_id="<1@x>")
    db.session.commit()
    now = utcnow()
    for delay in (0, *store.RETRIES):
        now += timedelta(seconds=delay)
        run_due("w", now=now)
    [row] = deliveries()
    assert (row.status, row.attempts) == ("failed", len(store.RETRIES) + 1)
    db.session.refresh(endpoint)
    assert not endpoint.enabled and endpoint.disabled_at == now
    assert "failed 9 times" in (endpoint.disabled_reason or "")
    events.emit(events.SENT, message_pk=2, message_id="<2@x>")  # not for a disabled endpoint
    db.session.commit()
    assert len(deliveries()) == 1
    # Re-enabled, a delivery sent again goes out.
    receiver.start()
    assert endpoints.enable(endpoint.id) and endpoints.send_again(endpoint.id, row.id)
    assert run_due("w").delivered == 1
    assert len(receiver.events) == 1


def test_a_test_event_goes_to_its_endpoint_alone(hooks_app, receiver):
    endpoint = endpoint_for(receiver, "message.failed")
    other = Receiver().start()
    try:
        endpoint_for(other)
        event_id = endpoints.send_test(endpoint.id)
        run_due("w")
    finally:
        other.stop()
    assert list(receiver.events) == [event_id]
    assert receiver.events[event_id]["type"] == "webhook.test"
    data = receiver.events[event_id]["data"]
    assert set(data) == ENVELOPE and (data["id"], data["message_id"], data["stream"]) == (None,) * 3
    assert other.requests == []


@pytest.mark.all_databases
def test_claims_are_disjoint_taken_back_after_the_lease_and_a_late_outcome_is_not_written(
    hooks_app, receiver, db_kind
):
    endpoint_for(receiver)
    events.emit_many([events.Event(events.SENT, n, f"<{n}@x>") for n in range(10)])
    db.session.commit()
    now = utcnow()
    first = store.claim("one", 6, now, in_flight=10)
    second = store.claim("two", 6, now, in_flight=10)
    assert len(first) == 6 and len(second) == 4
    assert not {c.id for c in first} & {c.id for c in second}
    assert store.claim("three", 6, now, in_flight=10) == []
    lease = store.lease(hooks_app.config["WEBHOOK_TIMEOUT"])
    assert store.release_stale(lease, now + timedelta(seconds=lease - 1)) == 0
    assert store.release_stale(lease, now + timedelta(seconds=lease + 1)) == 10
    again = store.claim("three", 10, now + timedelta(seconds=lease + 1), in_flight=10)
    assert len(again) == 10
    from outbox.capabilities.webhooks.post import Answer

    store.record("one", [(first[0], Answer(204, 5))], now)  # "one" lost its claim
    row = db.session.get(WebhookDelivery, first[0].id)
    assert row is not None and (row.status, row.locked_by) == ("sending", "three")


@pytest.mark.all_databases
def test_an_endpoint_has_at_most_its_share_in_flight_across_workers(hooks_app, db_kind):
    slow, _ = endpoints.add("http://127.0.0.1:9/slow")
    other, _ = endpoints.add("http://127.0.0.1:9/other", "message.failed")
    events.emit_many([events.Event(events.SENT, n, f"<{n}@x>") for n in range(10)])
    events.emit_many([events.Event(events.FAILED, n, f"<{n}@x>") for n in range(2)])
    db.session.commit()
    now = utcnow()
    first = store.claim("one", 8, now)
    assert sorted(c.endpoint_id for c in first) == [slow.id] * store.IN_FLIGHT + [other.id] * 2
    assert store.claim("two", 8, now) == []  # the slow one's share is in flight
    from outbox.capabilities.webhooks.post import Answer

    store.record("one", [(c, Answer(204, 5)) for c in first], now)
    assert [c.endpoint_id for c in store.claim("two", 8, now)] == [slow.id] * store.IN_FLIGHT


def test_retention_purges_old_settled_deliveries(hooks_app, receiver):
    endpoint_for(receiver)
    events.emit(events.SENT, message_pk=1, message_id="<1@x>")
    events.emit(events.SENT, message_pk=2, message_id="<2@x>")
    db.session.commit()
    run_due("w")
    events.emit(events.SENT, message_pk=3, message_id="<3@x>")  # pending: kept, however old
    db.session.commit()
    orphan = {
        "endpoint_id": 999,
        "event_id": "evt_gone",
        "kind": events.SENT,
        "payload": "{}",
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": utcnow(),
        "created_at": utcnow(),
    }  # its endpoint removed while a group was being recorded
    db.session.execute(insert(events.DELIVERIES), orphan)
    db.session.commit()
    assert store.purge_old(utcnow() - timedelta(days=1)) == 0
    retention.purge(utcnow() + timedelta(days=91))
    assert [d.status for d in deliveries()] == ["pending"]
    assert db.session.scalar(select(func.count()).select_from(Message)) == 0


def test_a_claim_taken_back_from_a_dead_worker_tells_of_the_deferral(hooks_app, make_message,
                                                                      receiver):  # fmt: skip
    endpoint_for(receiver, "message.deferred")
    message = make_message()
    [claim] = queue.claim_batch("dead-worker", 10)
    assert claim.id == message.id
    assert queue.release_stale(60, now=utcnow() + timedelta(seconds=61)) == 1
    assert run_due("w").delivered == 1
    [told] = receiver.of_kind("message.deferred")
    assert told["data"]["id"] == message.id and told["data"]["message_id"] == message.message_id
    assert told["data"]["text"].startswith("worker lost: claim by dead-worker")


def test_while_no_endpoint_is_enabled_recording_asks_the_database_once_in_a_while(
    hooks_app, smtp_app, make_message, receiver
):
    asked: list[str] = []

    def count(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
        if "webhook_endpoints" in statement:
            asked.append(statement)

    sqlalchemy.event.listen(db.engine, "before_cursor_execute", count)
    try:
        for _ in range(2):
            make_message()
            Worker().drain()
        assert len(asked) == 1  # the first group found none; the next ones did not ask
        endpoint_for(receiver)  # added in this process: the next group sees it at once
        make_message()
        Worker().drain()
    finally:
        sqlalchemy.event.remove(db.engine, "before_cursor_execute", count)
    assert [d.kind for d in deliveries()] == ["message.sent"]


def test_the_address_is_checked_again_at_every_attempt(hooks_app, receiver):
    endpoint_for(receiver)  # taken while private addresses were allowed
    hooks_app.config["WEBHOOK_ALLOW_PRIVATE"] = False
    events.emit(events.SENT, message_pk=1, message_id="<1@x>")
    db.session.commit()
    assert run_due("w").retrying == 1
    [row] = deliveries()
    assert row.status == "pending" and "127.0.0.1 is a private, loopback" in (row.error or "")
    assert receiver.requests == []
