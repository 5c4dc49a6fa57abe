"""The suppression list: matching, expiry, enqueue against it, and what reaches the SMTP server."""

from datetime import timedelta

import pytest
import sqlalchemy as sa

from outbox import queue
from outbox.auth import tokens
from outbox.capabilities import suppression
from outbox.core.status import Status
from outbox.models import Message, Suppression, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.rows import delivered, fresh, states

A, B, C = "a@example.com", "b@example.com", "c@example.com"


def listed(address: str, reason: str = "asked", **kwargs):  # type: ignore[no-untyped-def]
    entry, new = suppression.add(address, reason, "manual", **kwargs)
    db.session.commit()
    return entry


def api_message(client, token: str, **fields):  # type: ignore[no-untyped-def]
    body = {"from": "shop@example.com", "subject": "Hi", "text": "Hello", **fields}
    return client.post("/api/messages", json=body, headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(
    ("listed_as", "sent_to", "matches"),
    [
        ("ann@Example.COM", "ann@example.com", True),
        ("ann@example.com", "Ann@example.com", False),  # the local part is exact
        ("kunde@Bücher.example", "kunde@xn--bcher-kva.example", True),
        ("kunde@xn--bcher-kva.example", "kunde@bücher.example", True),
        ("kunde@faß.example", "kunde@fass.example", False),  # IDNA2008: ß is not ss
        ("ann@example.com.", "ann@example.com", True),
        ("<ann@example.com>", "ann@example.com", True),  # as a DSN may name it
    ],
)
def test_keys_fold_the_domain_only(listed_as, sent_to, matches):
    assert (suppression.key_of(listed_as) == suppression.key_of(sent_to)) is matches


@pytest.mark.all_databases
def test_add_is_idempotent_keeps_the_first_evidence_and_renews_an_expired_entry(app):
    now = utcnow()
    first, new = suppression.add(
        "ann@example.com", "bounced", "bounce", message_pk=7, bounce_pk=3, now=now
    )
    db.session.commit()
    assert new and (first.source, first.message_pk, first.bounce_pk) == ("bounce", 7, 3)
    again, new = suppression.add("ann@EXAMPLE.com", "refused", "smtp", message_pk=9)
    db.session.commit()
    assert not new and again.id == first.id and again.message_pk == 7
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Suppression)) == 1
    # Expired: it suppresses nothing, and the next add makes it anew with its own evidence.
    db.session.execute(sa.update(Suppression).values(expires_at=now - timedelta(seconds=1)))
    db.session.commit()
    assert suppression.matching(["ann@example.com"]) == {}
    renewed, new = suppression.add("ann@example.com", "refused", "smtp", message_pk=9)
    db.session.commit()
    assert new and renewed.id == first.id and (renewed.source, renewed.message_pk) == ("smtp", 9)
    assert renewed.bounce_pk is None
    assert set(suppression.matching(["ann@example.com", "ANN@example.com"])) == {"ann@example.com"}


@pytest.mark.all_databases
def test_matching_is_exact_in_the_local_part_on_every_database(app):
    listed("Ann@example.com")
    listed("kunde@bücher.example")
    found = suppression.matching(
        [
            "ann@example.com",
            "Ann@EXAMPLE.com",
            "kunde@xn--bcher-kva.example",
            "Kunde@bücher.example",
        ]
    )
    assert set(found) == {"Ann@example.com", "kunde@xn--bcher-kva.example"}


@pytest.mark.all_databases
def test_a_suppressed_recipient_never_reaches_the_smtp_server(smtp_app, smtp, client):
    token = tokens.create("shop")
    listed(B, "complained")
    answer = api_message(client, token, to=[A, "B@Example.com".replace("B@", "b@")], cc=[C])
    assert answer.status_code == 201
    shown = {r["address"]: (r["state"], r["reply"]) for r in answer.json["recipients"]}
    assert shown[B] == ("suppressed", "on the suppression list (manual): complained")
    assert Worker().drain().sent == 1
    row = fresh(answer.json["id"])
    assert row.status == Status.SENT
    assert {a: s for a, (s, _, _) in states(row).items()} == {A: "sent", B: "suppressed", C: "sent"}
    assert delivered(smtp) == {A: 1, C: 1}
    assert [mail.rcpt_tos for mail in smtp.received] == [[A, C]]


@pytest.mark.all_databases
def test_a_message_with_only_suppressed_recipients_is_stored_failed(smtp_app, smtp, make_message):
    listed(A, "hard bounce")
    listed(B, "complained")
    message = make_message(to=[A], bcc=[B])
    row = fresh(message.id)
    assert row.status == Status.FAILED and row.settled_at is not None
    assert row.last_error == f"every recipient is on the suppression list: {A}, {B}"
    assert Worker().drain().sent == 0
    assert smtp.received == []
    # A resend re-checks the list: still every recipient is on it.
    with pytest.raises(queue.MoveRefused, match="suppression list"):
        queue.resend(message.id, 3)
    # Removed from the list: the next resend sends to the one taken off, only.
    suppression.remove(A)
    db.session.commit()
    queue.resend(message.id, 3)
    assert Worker().drain().sent == 1
    assert [mail.rcpt_tos for mail in smtp.received] == [[A]]
    assert {a: s for a, (s, _, _) in states(fresh(message.id)).items()} == {
        A: "sent",
        B: "suppressed",
    }


@pytest.mark.all_databases
def test_suppressed_states_survive_a_failure_and_a_resend(smtp_app, smtp, make_message):
    listed(B)
    smtp.recorder.rcpt_replies[A] = "550 5.7.1 policy"
    message = make_message(to=[A, B])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.FAILED
    assert {a: s for a, (s, _, _) in states(row).items()} == {A: "failed", B: "suppressed"}
    del smtp.recorder.rcpt_replies[A]
    queue.resend_many([message.id], 3)
    Worker().drain()
    assert [mail.rcpt_tos for mail in smtp.received] == [[A]]
    # Put on the list after the failure: a resend of all failed messages leaves it out.
    smtp.recorder.data_reply = "554 5.6.0 content refused"
    other = make_message(to=[A, C])
    Worker().drain()
    assert fresh(other.id).status == Status.FAILED
    listed(C)
    smtp.recorder.data_reply = None
    assert queue.resend_all_failed(3) == 1
    Worker().drain()
    assert [mail.rcpt_tos for mail in smtp.received] == [[A], [A]]
    assert fresh(other.id).status == Status.SENT
    assert states(fresh(other.id))[C][0] == "suppressed"


@pytest.mark.all_databases
def test_expired_and_removed_entries_do_not_suppress_the_next_message(app, make_message):
    now = utcnow()
    listed(A, expires_at=now + timedelta(minutes=5))
    assert fresh(make_message(to=[A]).id).status == Status.FAILED
    later = make_message(to=[A], now=now + timedelta(minutes=6))
    assert fresh(later.id).status == Status.QUEUED
    listed(B)
    suppression.remove(B)
    db.session.commit()
    assert fresh(make_message(to=[B]).id).status == Status.QUEUED


@pytest.mark.all_databases
def test_reject_mode_refuses_with_422_and_stores_nothing(app, client):
    app.config["SUPPRESSED"] = "reject"
    token = tokens.create("shop")
    listed(B, "complained")
    answer = api_message(client, token, to=[A], cc=["b@EXAMPLE.com"])
    assert answer.status_code == 422
    assert answer.json["errors"] == {
        "cc": "b@example.com is on the suppression list (manual): complained"
    }
    batch = {
        "messages": [
            {"from": "s@example.com", "to": [A], "text": "x"},
            {"from": "s@example.com", "to": [C], "bcc": [B], "text": "x"},
        ]
    }
    answer = client.post(
        "/api/messages/batch", json=batch, headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 422
    assert answer.json["errors"] == [
        {
            "index": 1,
            "field": "bcc",
            "error": f"{B} is on the suppression list (manual): complained",
        }
    ]
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Message)) == 0


@pytest.mark.all_databases
def test_a_batch_marks_its_suppressed_recipients_in_one_go(app, client):
    token = tokens.create("shop")
    listed(B)
    batch = {
        "messages": [
            {"from": "s@example.com", "to": [A], "text": "x"},
            {"from": "s@example.com", "to": [B], "text": "x"},
            {"from": "s@example.com", "to": [B, C], "text": "x"},
        ]
    }
    answer = client.post(
        "/api/messages/batch", json=batch, headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 201
    ids = [m["id"] for m in answer.json["messages"]]
    assert [fresh(pk).status for pk in ids] == [Status.QUEUED, Status.FAILED, Status.QUEUED]
    assert states(fresh(ids[2]))[B][0] == "suppressed"


def test_purge_old_removes_only_entries_expired_before_the_cutoff(app):
    now = utcnow()
    listed(A)
    listed(B, expires_at=now + timedelta(days=1))
    db.session.execute(
        sa.update(Suppression)
        .where(Suppression.address == B)
        .values(expires_at=now - timedelta(days=100))
    )
    listed(C, expires_at=now + timedelta(days=1))
    db.session.commit()
    assert suppression.purge_old(now - timedelta(days=90)) == 1
    assert sorted(db.session.scalars(sa.select(Suppression.address))) == [A, C]


def test_the_retention_purge_removes_entries_expired_long_ago(app):
    from outbox.capabilities import retention

    now = utcnow()
    listed(A)
    listed(B, expires_at=now + timedelta(days=1))
    db.session.execute(
        sa.update(Suppression)
        .where(Suppression.address == B)
        .values(expires_at=now - timedelta(days=app.config["RETENTION_DAYS"] + 1))
    )
    db.session.commit()
    retention.purge(now)
    assert list(db.session.scalars(sa.select(Suppression.address))) == [A]


@pytest.mark.all_databases
def test_an_entry_made_by_another_process_is_matched_within_a_second(app, make_message):
    assert suppression.matching([A], hot=True) == {}  # empty: enqueue remembers it
    app.extensions["suppression_empty"][0] += 3600  # however slowly this test runs
    with db.engine.begin() as conn:  # as another process would add it
        conn.execute(sa.insert(Suppression.__table__), {
            "address": A, "key": A, "reason": "elsewhere", "source": "manual",
            "created_at": utcnow(), "created_by": "other"})  # fmt: skip
    assert suppression.matching([A], hot=True) == {}  # not yet looked again
    assert set(suppression.matching([A])) == {A}  # any other caller asks every time
    app.extensions["suppression_empty"][0] -= 3600 + suppression.EMPTY_SECONDS  # a second later
    assert set(suppression.matching([A], hot=True)) == {A}
    assert fresh(make_message(to=[A]).id).status == Status.FAILED


def test_the_setting_takes_mark_or_reject_only(tmp_path):
    from outbox import create_app
    from tests.support.app import base_config

    with pytest.raises(ValueError, match="SUPPRESSED"):
        create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}", SUPPRESSED="drop"))


@pytest.mark.all_databases
def test_an_address_listed_after_its_message_was_queued_is_not_sent_to(
    smtp_app, smtp, make_message
):
    queued = make_message(to=[A, B], cc=[C]).id
    alone = make_message(to=[B]).id  # every recipient listed before the worker comes
    listed(B, "hard bounce")  # after enqueue: the worker's batch looks again
    db.session.commit()
    drained = Worker().drain()
    assert (drained.sent, drained.failed) == (1, 1)
    assert delivered(smtp) == {A: 1, C: 1}  # B never reached the server
    row = fresh(queued)
    assert row.status == Status.SENT
    assert {a: s for a, (s, _, _) in states(row).items()} == {A: "sent", B: "suppressed", C: "sent"}
    failed = fresh(alone)
    assert failed.status == Status.FAILED and failed.settled_at is not None
    assert failed.last_error == "every recipient still to be sent to is on the suppression list"
    assert states(failed)[B][0] == "suppressed"
    with pytest.raises(queue.MoveRefused, match="suppression list"):  # still listed
        queue.resend(alone, 3)
