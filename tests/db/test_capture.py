"""Capture mode on the databases and a real SMTP server: what is kept, what is sent, what goes."""

from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox.capabilities import retention
from outbox.capabilities.capture import store, transport
from outbox.capabilities.capture.transport import SAID
from outbox.core.status import Status
from outbox.models import Captured, Message, utcnow
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support.dkimkeys import published, verifies
from tests.support.rows import attempts_of, fresh, make_due, states
from tests.support.smtpd import free_port
from tests.support.statements import statements

THREE = {"to": ["ann@example.com", "bob@team.example"], "cc": ["cy@other.example"]}


def captured_rows() -> list[Captured]:
    db.session.expire_all()
    return list(db.session.scalars(select(Captured).order_by(Captured.id)))


@pytest.mark.all_databases
def test_capture_sends_each_recipient_into_one_kept_dkim_signed_copy_and_none_to_the_server(
    smtp_app, smtp, runner, make_message
):
    added = runner.invoke(args=["dkim", "add", "example.com", "--selector", "s1"])
    assert added.exit_code == 0, added.output
    smtp_app.config["DELIVERY"] = "capture"
    message = make_message(subject="Staging", **THREE)
    assert Worker().drain() == Tally(sent=1)
    row = fresh(message.id)
    assert row.status == Status.SENT
    assert {state for state, _, _ in states(row).values()} == {"sent"}
    assert len(states(row)) == 3
    (attempt,) = attempts_of(message.id)
    assert (attempt.outcome, attempt.smtp_code, attempt.reply) == ("sent", 250, SAID)
    (kept,) = captured_rows()
    assert kept.message_pk == message.id and kept.sender == "outbox@example.com"
    assert kept.recipients == ["ann@example.com", "bob@team.example", "cy@other.example"]
    assert kept.raw.startswith(b"DKIM-Signature: ")
    assert verifies(kept.raw, published(added.output))
    assert f"Message-ID: {message.message_id}".encode() in kept.raw
    assert smtp.received == []  # the network is left out
    assert store.of_message(message.id) == [kept.id]


@pytest.mark.all_databases
def test_allowlist_sends_the_listed_recipients_over_smtp_and_captures_the_rest(
    smtp_app, smtp, make_message
):
    smtp_app.config["DELIVERY"] = "allowlist"
    smtp_app.config["DELIVERY_ALLOW"] = frozenset({"ann@example.com", "@team.example"})
    message = make_message(**THREE)
    assert Worker().drain() == Tally(sent=1)
    (got,) = smtp.received
    assert got.rcpt_tos == ["ann@example.com", "bob@team.example"]
    (kept,) = captured_rows()
    assert kept.recipients == ["cy@other.example"]
    assert got.message_id.encode() in kept.raw  # one mail, split by recipient
    row = fresh(message.id)
    assert row.status == Status.SENT and len(states(row)) == 3
    assert {state for state, _, _ in states(row).values()} == {"sent"}


@pytest.mark.all_databases
def test_allowlist_keeps_nothing_while_the_server_is_down_and_captures_once_when_it_is_back(
    smtp_app, smtp, make_message
):
    smtp_app.config["DELIVERY"] = "allowlist"
    smtp_app.config["DELIVERY_ALLOW"] = frozenset({"@example.com"})
    smtp_app.config["MAIL_PORT"] = smtp_app.extensions["mail"].port = free_port()  # refused
    message = make_message(**THREE)
    assert Worker().drain().deferred == 1
    assert captured_rows() == []
    assert fresh(message.id).status == Status.DEFERRED
    smtp_app.config["MAIL_PORT"] = smtp_app.extensions["mail"].port = smtp.port
    make_due(message.id)
    assert Worker().drain() == Tally(sent=1)
    assert [got.rcpt_tos for got in smtp.received] == [["ann@example.com"]]
    assert [kept.recipients for kept in captured_rows()] == [
        ["bob@team.example", "cy@other.example"]
    ]


@pytest.mark.all_databases
def test_smtp_mode_captures_nothing_and_asks_nothing_of_the_store(smtp_app, smtp, make_message):
    for _ in range(5):
        make_message(**THREE)
    with statements() as seen:
        assert Worker().drain() == Tally(sent=5)
    assert [s for s in seen if "captured" in s] == []
    assert len(smtp.received) == 5 and captured_rows() == []


@pytest.mark.all_databases
def test_capture_writes_a_batch_of_copies_in_one_statement_before_its_outcomes(
    smtp_app, make_message
):
    smtp_app.config["DELIVERY"] = "capture"
    for _ in range(5):
        make_message(**THREE)
    with statements() as seen:
        assert Worker().drain() == Tally(sent=5)
    kept = [n for n, s in enumerate(seen) if s.lstrip().upper().startswith("INSERT INTO CAPTURED")]
    recorded = [
        n for n, s in enumerate(seen) if s.lstrip().upper().startswith("INSERT INTO ATTEMPTS")
    ]
    assert len(kept) == 1 and len(captured_rows()) == 5
    assert recorded and kept[0] < min(recorded)


@pytest.mark.all_databases
def test_a_captured_copy_goes_with_its_message_and_with_its_bodies(smtp_app, make_message):
    smtp_app.config["DELIVERY"] = "capture"
    old, young = make_message(), make_message()
    assert Worker().drain() == Tally(sent=2)
    assert len(captured_rows()) == 2
    now = utcnow() + timedelta(days=smtp_app.config["RETENTION_BODY_DAYS"] + 1)
    db.session.execute(
        Message.__table__.update()
        .where(Message.id == old.id)
        .values(settled_at=utcnow() - timedelta(days=smtp_app.config["RETENTION_DAYS"] + 1))
    )
    db.session.commit()
    done = retention.purge(now=utcnow())
    assert done.messages == 1
    assert [kept.message_pk for kept in captured_rows()] == [young.id]
    retention.purge(now=now)
    assert captured_rows() == []


def test_send_queued_warns_that_mail_is_kept_and_names_the_allowlist(
    smtp_app, runner, make_message, caplog
):
    smtp_app.config["DELIVERY"] = "allowlist"
    smtp_app.config["DELIVERY_ALLOW"] = frozenset({"@team.example", "qa@example.com"})
    make_message(to=["ann@other.example"])
    result = runner.invoke(args=["send-queued"])
    assert result.exit_code == 0, result.output
    assert "sent 1" in result.output
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        "OUTBOX_DELIVERY=allowlist: mail goes out only to @team.example, qa@example.com; "
        "mail to anyone else is kept on the Captured page"
    ]
    assert [kept.recipients for kept in captured_rows()] == [["ann@other.example"]]


@pytest.mark.all_databases
def test_copies_past_the_bytes_held_are_written_at_once(smtp_app, make_message, monkeypatch):
    monkeypatch.setattr(transport, "HELD_BYTES", 1)  # every copy is past it
    smtp_app.config["DELIVERY"] = "capture"
    for _ in range(3):
        make_message(**THREE)
    with statements() as seen:
        assert Worker().drain() == Tally(sent=3)
    kept = [s for s in seen if s.lstrip().upper().startswith("INSERT INTO CAPTURED")]
    assert len(kept) == 3 and len(captured_rows()) == 3
