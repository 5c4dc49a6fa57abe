"""`outbox bounces --listen` as a real process: bounce mails of real MTAs' formats over SMTP."""

import asyncio
import json
import os
import smtplib
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass

import pytest
from sqlalchemy import select

from outbox.capabilities import suppression
from outbox.capabilities.bounces import verp
from outbox.capabilities.webhooks import endpoints, run_due
from outbox.core.status import Status
from outbox.models import BounceMail, WebhookDelivery
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import bouncemail, processes
from tests.support.bouncemail import BOUNCES, MAX_BYTES
from tests.support.receiver import Receiver
from tests.support.rows import fresh, states
from tests.support.smtpd import Received, Recorder, RecordingController, free_port


def sent(app, smtp, make_message, to: list[str]) -> tuple[int, dict[str, str]]:  # type: ignore[no-untyped-def]
    """A message sent with VERP on: its id and each recipient's return path as sent."""
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message = make_message(to=to)
    before = len(smtp.received)
    Worker().drain()
    assert fresh(message.id).status == Status.SENT
    return message.id, {m.rcpt_tos[0]: m.mail_from for m in smtp.received[before:]}


def bounce(port: int, to: str, raw: bytes) -> None:
    """Send a bounce mail (null sender) to the listener."""
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.sendmail("<>", [to], raw)


def stored() -> list[BounceMail]:
    db.session.expire_all()
    return list(db.session.scalars(select(BounceMail).order_by(BounceMail.id)))


@pytest.mark.all_databases
def test_bounces_of_four_mtas_mark_their_recipients_bounced(smtp_app, smtp, make_message, listener):
    formats = [bouncemail.postfix, bouncemail.exim, bouncemail.exchange, bouncemail.gmail]
    expected = ["5.1.1", "5.1.1", "5.1.10", "5.1.1"]
    for build, status in zip(formats, expected, strict=True):
        # A bounced address is suppressed: each format bounces a recipient of its own.
        bob = f"bob.{build.__name__}@example.org"
        pk, paths = sent(smtp_app, smtp, make_message, ["ann@example.org", bob])
        message = fresh(pk)
        bounce(listener, paths[bob], build(paths[bob], bob, message.message_id))
        row = fresh(pk)
        assert row.status == Status.SENT  # the message was sent; one recipient came back
        found = states(row)
        assert found["ann@example.org"][0] == "sent", build.__name__
        assert found[bob][0] == "bounced", build.__name__
        entry = next(e for e in row.recipients if e["address"] == bob)
        assert entry["dsn"] == status, build.__name__
        mail = stored()[-1]
        assert (mail.kind, mail.message_pk, mail.matched_by, mail.via) == (
            "hard",
            pk,
            "verp",
            "smtp",
        )
        assert mail.recipient == bob and mail.status == status
        assert mail.envelope_from is None and mail.envelope_to == paths[bob]
        db.session.expire_all()
        assert suppression.find(bob) is not None, build.__name__


def test_with_verp_a_bounce_matched_by_message_id_alone_marks_nothing(
    smtp_app, smtp, make_message, listener
):
    # Any recipient sees the Message-ID and could forge a bounce for another recipient.
    pk, _ = sent(smtp_app, smtp, make_message, ["ann@example.org", "bob@example.org"])
    forged = bouncemail.postfix(BOUNCES, "bob@example.org", fresh(pk).message_id)
    bounce(listener, BOUNCES, forged)
    assert states(fresh(pk))["bob@example.org"][0] == "sent"
    (mail,) = stored()
    assert (mail.kind, mail.message_pk, mail.matched_by) == ("hard", pk, "message-id")
    assert "only a bounce to the recipient's own return path marks it" in (mail.note or "")


def test_a_soft_bounce_is_kept_and_changes_nothing(smtp_app, smtp, make_message, listener):
    pk, paths = sent(smtp_app, smtp, make_message, ["ann@example.org"])
    path = paths["ann@example.org"]
    bounce(listener, path, bouncemail.gmail(path, "ann@example.org", fresh(pk).message_id, True))
    assert states(fresh(pk))["ann@example.org"][0] == "sent"
    (mail,) = stored()
    assert (mail.kind, mail.message_pk, mail.status) == ("soft", pk, "4.4.1")


def test_an_out_of_office_is_not_a_bounce(smtp_app, smtp, make_message, listener):
    pk, paths = sent(smtp_app, smtp, make_message, ["ann@example.org"])
    path = paths["ann@example.org"]
    bounce(listener, path, bouncemail.out_of_office(path, "ann@example.org"))
    assert states(fresh(pk))["ann@example.org"][0] == "sent"
    (mail,) = stored()
    assert (mail.kind, mail.message_pk) == ("auto-reply", None)


def test_an_unmatched_mail_is_kept_and_the_same_mail_twice_once(app, listener):
    lost = bouncemail.postfix(BOUNCES, "ann@example.org", "<never-sent@example.com>")
    bounce(listener, BOUNCES, lost)
    bounce(listener, BOUNCES, lost)  # a relay that sends it again: one row
    bounce(listener, BOUNCES, bouncemail.stray(BOUNCES))
    first, second = stored()
    assert (first.kind, first.message_pk, first.raw) == ("hard", None, lost)
    assert "no message of outbox matches" in (first.note or "")
    assert (second.kind, second.message_pk) == ("unparsed", None)


def test_only_the_bounce_address_and_valid_verp_forms_are_taken(app, listener):
    forged = verp.address_for(BOUNCES, "not the key", 1, 0)
    for address in ("postmaster@example.com", forged, "bounces@example.org"):
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            bounce(listener, address, bouncemail.stray(address))
        code, text = refused.value.recipients[address]
        assert code == 550 and text.startswith(b"5.1.1")
    too_big = bouncemail.stray(BOUNCES) + (b"x" * 70 + b"\r\n") * (MAX_BYTES // 70)
    with pytest.raises(smtplib.SMTPSenderRefused) as declared:  # SIZE said so at MAIL FROM
        bounce(listener, BOUNCES, too_big)
    assert declared.value.smtp_code == 552
    with smtplib.SMTP("127.0.0.1", listener, timeout=10) as client:  # a sender without SIZE
        client.ehlo()
        assert client.mail("<>")[0] == 250 and client.rcpt(BOUNCES)[0] == 250
        assert client.data(too_big) == (552, b"Error: Too much mail data")
    assert stored() == []


def test_a_hard_bounce_suppresses_the_address(smtp_app, smtp, make_message, listener):
    pk, paths = sent(smtp_app, smtp, make_message, ["ann@example.org"])
    path = paths["ann@example.org"]
    bounce(listener, path, bouncemail.postfix(path, "ann@example.org", fresh(pk).message_id))
    (mail,) = stored()
    (entry,) = suppression.matching(["ann@example.org"]).values()
    assert (entry.source, entry.message_pk, entry.bounce_pk) == ("bounce", pk, mail.id)


def test_the_command_names_what_is_missing_or_wrong(app, runner):
    done = runner.invoke(args=["bounces", "--listen", "127.0.0.1:2525"])
    assert done.exit_code == 2 and "set OUTBOX_BOUNCE_ADDRESS first" in done.output
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    for bad in ("2525", "127.0.0.1:", "127.0.0.1:99999", ":2525"):
        done = runner.invoke(args=["bounces", "--listen", bad])
        assert done.exit_code == 2 and "is not HOST:PORT" in done.output, bad
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = runner.invoke(args=["bounces", "--listen", f"127.0.0.1:{port}"])
    assert done.exit_code == 1 and f"cannot listen on 127.0.0.1:{port}" in done.output


def test_a_hard_bounce_is_told_to_the_apps_webhook_signed(smtp_app, smtp, make_message, listener):
    smtp_app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the receiver is on loopback
    receiver = Receiver().start()
    try:
        _, receiver.secret = endpoints.add(receiver.url, "recipient.bounced")
        pk, paths = sent(smtp_app, smtp, make_message, ["ann@example.org", "bob@example.org"])
        path = paths["bob@example.org"]
        bounce(listener, path, bouncemail.gmail(path, "bob@example.org", fresh(pk).message_id))
        assert run_due("test-worker").delivered == 1
        [told] = receiver.of_kind("recipient.bounced")
    finally:
        receiver.stop()
    assert receiver.refused == [] and receiver.duplicates == 0
    assert told["data"]["id"] == pk and told["data"]["message_id"] == fresh(pk).message_id
    assert told["data"]["recipient"] == "bob@example.org" and told["data"]["dsn"] == "5.1.1"
    assert told["data"]["code"] == 550
    assert "The email account that you tried to reach does not exist" in told["data"]["text"]


@dataclass
class BouncingAtOnce(Recorder):
    """A server that hands each mail back to outbox's bounce listener as undeliverable
    before it answers the mail's data: the bounce is stored and read before the worker
    has the 250, so before it can record the send, however fast or slow the machine."""

    listener: int = 0

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        mail = Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.content)
        raw = bouncemail.postfix(mail.mail_from, mail.rcpt_tos[0], mail.message_id)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, bounce, self.listener, mail.mail_from, raw)
        return await super().handle_DATA(server, session, envelope)


@pytest.mark.all_databases
def test_bounces_back_before_their_sends_are_recorded_are_all_applied(
    app, make_message, listener, tmp_path
):
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    endpoints.add("http://127.0.0.1:9/hook", "recipient.bounced")
    to = [f"user{n}@example.org" for n in range(20)]
    pks = [make_message(to=[address]).id for address in to]
    recorder = BouncingAtOnce(listener=listener)
    server = RecordingController(recorder, hostname="127.0.0.1", port=free_port())
    server.start()
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY=app.secret_key,
               OUTBOX_BOUNCE_ADDRESS=BOUNCES, OUTBOX_MAIL_PORT=str(server.port))  # fmt: skip
    command = [sys.executable, "-m", "outbox", "send-queued"]
    try:
        with processes.group(command, env=env, stderr=subprocess.PIPE, text=True) as worker:
            _, said = worker.communicate(timeout=120)
            assert worker.returncode == 0, said
    finally:
        server.stop()
    assert sorted(r for m in recorder.received for r in m.rcpt_tos) == sorted(to)
    for pk, address in zip(pks, to, strict=True):
        row = fresh(pk)
        assert (row.status, states(row)[address][0]) == (Status.SENT, "bounced"), address
    entries = suppression.matching(to)
    assert len(entries) == 20 and {e.source for e in entries.values()} == {"bounce"}
    told = Counter(
        (data["id"], data["recipient"])
        for data in (json.loads(p)["data"] for p in db.session.scalars(
            select(WebhookDelivery.payload).where(WebhookDelivery.kind == "recipient.bounced")))
    )  # fmt: skip
    assert told == Counter(zip(pks, to, strict=True))
    mails = stored()
    assert len(mails) == 20 and not any(mail.waiting for mail in mails)
