"""Retention: old settled messages go with their attempts and attachments, bodies go first."""

import base64
import getpass
import itertools
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from apscheduler.schedulers.background import BackgroundScheduler

from outbox import queue, worker
from outbox.auth import tokens
from outbox.capabilities import retention
from outbox.capabilities.mailings import purge as mailing_purge
from outbox.config import check
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import (
    Attachment,
    AttachmentChunk,
    Attempt,
    AuditEvent,
    Mailing,
    MailingAttachment,
    MailingAttachmentChunk,
    Message,
    RetentionRun,
    utcnow,
)
from outbox.models.db import db
from outbox.ops import reports
from outbox.worker import runner
from tests.support import mailing_helpers, outcomes
from tests.support.api import MESSAGES, RETRY, auth

DAY = timedelta(days=1)
CHECKOUT = Path(__file__).resolve().parents[2]


def count(model) -> int:  # type: ignore[no-untyped-def]
    found = db.session.scalar(sa.select(sa.func.count()).select_from(model))
    db.session.commit()
    return int(found or 0)


def age(message_pk: int, days: float) -> None:
    """Make a message look settled (and tried) that many days ago: timestamps only."""
    then = utcnow() - timedelta(days=days)
    db.session.execute(sa.update(Message).where(Message.id == message_pk)
                       .values(settled_at=then, created_at=then - DAY))  # fmt: skip
    db.session.execute(sa.update(Attempt).where(Attempt.message_pk == message_pk)
                       .values(started_at=then, finished_at=then))  # fmt: skip
    db.session.commit()


def settled(make_message, how: str, days: float, files: bool = False) -> int:  # type: ignore[no-untyped-def]
    """A message sent, failed or cancelled through the queue, settled days ago."""
    extra = {"attachments": [Upload("a.txt", "text/plain", b"hello")]} if files else {}
    message = make_message(html="<p>Hi</p>", **extra)
    if how == "cancelled":
        queue.cancel(message.id)
    else:
        (claim,) = queue.claim_batch("w1", 10)
        now = utcnow()
        assert (
            outcomes.sent(claim, now) if how == "sent" else outcomes.failed(claim, now, 550, "no")
        )
    age(message.id, days)
    return message.id


def row(message_pk: int) -> Message | None:
    found = db.session.get(Message, message_pk)
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_old_settled_messages_go_with_their_attempts_and_attachments(app, make_message):
    old = [settled(make_message, how, 91, files=True) for how in ("sent", "failed", "cancelled")]
    young = settled(make_message, "sent", 89)
    done = retention.purge()
    assert (done.messages, done.attempts, done.attachments) == (3, 2, 3)
    assert done.bodies_dropped == 1  # the young one is past 30 days
    assert [row(pk) for pk in old] == [None] * 3
    assert count(Message) == 1 and count(Attempt) == 1
    assert count(Attachment) == 0 and count(AttachmentChunk) == 0
    kept = row(young)
    assert kept and kept.text_body is None and kept.html_body is None
    assert kept.bodies_dropped_at is not None and kept.status == Status.SENT


@pytest.mark.all_databases
def test_messages_in_flight_stay_however_old_and_a_resend_unsettles(app, make_message):
    failed = settled(make_message, "failed", 200)
    assert row(failed).settled_at is not None  # type: ignore[union-attr]
    long_ago = utcnow() - timedelta(days=400)
    waiting = [make_message(now=long_ago).id for _ in range(3)]
    queue.claim_batch("w1", 1, now=utcnow())  # one sending
    (later,) = queue.claim_batch("w2", 1, now=utcnow())
    assert outcomes.deferred(later, utcnow(), 451, "later", RETRY) is Status.DEFERRED
    queue.resend(failed, 3)
    assert row(failed).settled_at is None  # type: ignore[union-attr]
    done = retention.purge()
    assert (done.messages, done.bodies_dropped) == (0, 0)
    statuses = sorted(row(pk).status for pk in [*waiting, failed])  # type: ignore[union-attr]
    assert statuses == ["deferred", "queued", "queued", "sending"]
    assert all(row(pk).text_body for pk in [*waiting, failed])  # type: ignore[union-attr]


@pytest.mark.all_databases
def test_the_message_page_says_the_bodies_were_dropped(app, make_message, signed_in):
    pk = settled(make_message, "sent", 31, files=True)
    assert retention.purge().bodies_dropped == 1
    page = signed_in.get(f"/messages/{pk}").get_data(as_text=True)
    assert "The bodies and attachments were dropped on" in page
    assert "after 30 days (OUTBOX_RETENTION_BODY_DAYS)" in page
    assert "Hello there" not in page and "a.txt" not in page
    shown = signed_in.get(f"{MESSAGES}/{pk}", headers=auth(tokens.create("reader")))
    assert shown.status_code == 200 and shown.get_json()["status"] == "sent"


@pytest.mark.all_databases
def test_a_dry_run_changes_nothing_and_counts_what_the_purge_then_removes(
    app, make_message, runner
):
    for how, days in (("sent", 100), ("failed", 95), ("cancelled", 40), ("sent", 5)):
        settled(make_message, how, days, files=True)
    before = count(Message), count(Attempt), count(Attachment)
    dry = runner.invoke(args=["purge", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert (count(Message), count(Attempt), count(Attachment)) == before
    real = runner.invoke(args=["purge"])
    assert real.exit_code == 0, real.output
    assert dry.output.replace("would remove: ", "") == real.output.replace("removed: ", "")
    assert real.output.strip() == ("removed: 2 messages, 2 attempts, 3 attachments removed; "
                                   "bodies dropped from 1 messages")  # fmt: skip
    again = runner.invoke(args=["purge", "--older-than", "4"])
    assert "removed: 2 messages, 1 attempts, 1 attachments" in again.output
    assert count(Message) == 0
    nothing = runner.invoke(args=["purge"])  # nothing left: no change, no audit row
    assert nothing.output.startswith("removed: 0 messages")
    trail = db.session.execute(sa.select(AuditEvent.actor, AuditEvent.action, AuditEvent.detail)
                               .order_by(AuditEvent.id)).all()  # fmt: skip
    assert [(actor, action) for actor, action, _ in trail] == [
        (f"cli:{getpass.getuser()}", "purge"), (f"cli:{getpass.getuser()}", "purge")]  # fmt: skip
    assert trail[0].detail == real.output.strip().removeprefix("removed: ")


@pytest.mark.all_databases
def test_the_chart_is_the_same_before_and_after_a_purge(app, make_message):
    for days in (0.2, 0.5, 0.9, 1.5, 3):
        settled(make_message, "sent", days)
        settled(make_message, "failed", days)
    now = utcnow()
    before = reports.hourly(now)
    db.session.commit()
    done = retention.purge(now, days=1)
    assert done.messages == 4
    assert reports.hourly(now) == before
    assert sum(h.sent + h.failed for h in before) == 6


def test_settings_refuse_bodies_outliving_their_messages(app):
    config = dict(app.config)
    check({**config, "RETENTION_DAYS": 0, "RETENTION_BODY_DAYS": 0})
    check({**config, "RETENTION_DAYS": 0, "RETENTION_BODY_DAYS": 30})  # keep rows, drop bodies
    for keep, body in ((30, 31), (30, 0), (-1, 0)):
        with pytest.raises(ValueError):
            check({**config, "RETENTION_DAYS": keep, "RETENTION_BODY_DAYS": body})


RACER = """
import sys, time
from sqlalchemy import text
from outbox import create_app
from outbox.capabilities import retention
from outbox.models.db import db
url, start = sys.argv[1], float(sys.argv[2])
app = create_app({"DATABASE_URL": url, "SECRET_KEY": "test"})
with app.app_context():
    db.session.execute(text("SELECT 1"))  # connected before the start
    db.session.commit()
    time.sleep(max(0.0, start - time.time()))
    print(retention.purge_if_due(sys.argv[3]) is not None)
"""


@pytest.mark.all_databases
def test_of_workers_racing_for_the_daily_purge_one_runs_it(app, make_message):
    settled(make_message, "sent", 100)
    start = time.time() + 3
    url = app.config["DATABASE_URL"]
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, url, str(start), f"w{n}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=CHECKOUT)
        for n in range(4)
    ]  # fmt: skip
    answers = [r.communicate(timeout=120) for r in racers]
    assert [r.returncode for r in racers] == [0] * 4, answers
    assert sorted(out.strip() for out, _ in answers) == ["False"] * 3 + ["True"], answers
    assert count(Message) == 0
    assert count(RetentionRun) == 1
    assert not retention.take_turn(utcnow())  # not due again for a day
    assert retention.take_turn(utcnow() + retention.EVERY)


@pytest.mark.all_databases
def test_a_message_without_its_bodies_is_never_sent_again(app, make_message):
    failed = settled(make_message, "failed", 40)
    sent = settled(make_message, "sent", 40)
    assert retention.purge().bodies_dropped == 2
    with pytest.raises(queue.MoveRefused):
        queue.resend(failed, 3)
    assert queue.resend_all_failed(3) == 0
    assert queue.resend_many([failed], 3).done == 0
    with pytest.raises(queue.MoveRefused):
        queue.send_again(sent, "staff", 3)
    assert row(failed).status == Status.FAILED  # type: ignore[union-attr]


def test_the_worker_purges_on_a_schedule_of_its_own_once_a_day(app, make_message):
    old = settled(make_message, "sent", 100)
    scheduler = BackgroundScheduler(timezone="UTC")
    runner.schedule(scheduler, app, worker.Worker())
    job = scheduler.get_job("retention")
    assert job.trigger.interval == timedelta(seconds=runner.RETENTION_EVERY)
    job.func()
    assert row(old) is None
    again = settled(make_message, "sent", 100)
    job.func()  # the day's purge has run
    assert row(again) is not None


NAMES = itertools.count()


def _mailing(client, days_old: float, recipients: int = 2) -> int:  # type: ignore[no-untyped-def]
    """A mailing of recipients with one attachment, posted over the API days_old ago."""
    attachment = {"filename": "plan.txt", "content_type": "text/plain",
                  "content": base64.b64encode(b"the plan").decode()}  # fmt: skip
    people = [{"email": f"r{n}@example.com", "fields": {"first": f"R{n}", "plan": "tin"}}
              for n in range(recipients)]  # fmt: skip
    payload = mailing_helpers.body(people, attachments=[attachment])
    answer = mailing_helpers.post(client, tokens.create(f"shop{next(NAMES)}"), payload)
    assert answer.status_code == 201, answer.get_data(as_text=True)
    mailing_id = answer.get_json()["id"]
    then = utcnow() - timedelta(days=days_old)
    db.session.execute(sa.update(Mailing).where(Mailing.id == mailing_id).values(created_at=then))
    db.session.commit()
    return int(mailing_id)


def _settle_rows(mailing_id: int, days: float, keep: int = 0) -> None:
    """Cancel the mailing's rows, all but the last keep, settled days ago."""
    rows = mailing_helpers.rows_of(mailing_id)
    for message in rows[: len(rows) - keep]:
        queue.cancel(message.id)
        age(message.id, days)


@pytest.mark.all_databases
def test_a_mailing_goes_with_its_attachments_once_the_purge_took_its_last_row(app, client, runner):
    done = _mailing(client, days_old=100)  # every row settled long ago: goes
    waiting = _mailing(client, days_old=100)  # one row still queued: stays whole
    young = _mailing(client, days_old=1, recipients=1)  # no rows, but new: stays
    # (a guard only: the API never leaves a mailing without rows, and a row is settled
    # after its mailing was made, so a purged row's mailing is as old as the cutoff)
    db.session.execute(sa.delete(Message).where(Message.mailing_id == young))
    db.session.commit()
    _settle_rows(done, days=95)
    _settle_rows(waiting, days=95, keep=1)
    dry = runner.invoke(args=["purge", "--dry-run", "--older-than", "30"])
    assert dry.output.strip().endswith("; 1 mailings removed"), dry.output
    assert count(Mailing) == 3  # a dry run removes nothing
    real = runner.invoke(args=["purge", "--older-than", "30"])
    assert real.exit_code == 0, real.output
    said = "3 messages, 0 attempts, 0 attachments removed; bodies dropped from 0 messages"
    assert real.output.strip() == f"removed: {said}; 1 mailings removed"
    assert dry.output.replace("would remove: ", "") == real.output.replace("removed: ", "")
    left = set(db.session.scalars(sa.select(Mailing.id)))
    files = list(db.session.scalars(sa.select(MailingAttachment.mailing_id)))
    chunks = count(MailingAttachmentChunk)
    db.session.commit()
    assert left == {waiting, young}
    assert sorted(files) == sorted([waiting, young]) and chunks == 2
    (kept,) = mailing_helpers.rows_of(waiting)  # its last recipient can still be sent
    assert kept.status == "queued" and kept.mailing_id == waiting
    again = runner.invoke(args=["purge", "--older-than", "30"])
    assert "mailings removed" not in again.output  # nothing more to take


SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb),
           pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip


@pytest.mark.parametrize("db_kind", SERVERS, indirect=True)
def test_a_mailing_given_a_recipient_while_the_purge_waits_for_it_stays(app, client):
    """An append holds the mailing's row lock while it adds rows (intake.append): the purge
    chose the mailing as empty, waits for that lock, and under it finds the new row."""
    mailing_id = _mailing(client, days_old=100, recipients=1)
    (row,) = mailing_helpers.rows_of(mailing_id)
    db.session.execute(sa.update(Message).where(Message.id == row.id).values(mailing_id=None))
    db.session.commit()  # the mailing has no rows: the purge will choose it
    appending = db.engine.connect()
    appending.begin()
    appending.execute(sa.select(Mailing.id).where(Mailing.id == mailing_id).with_for_update())
    appending.execute(sa.update(Message).where(Message.id == row.id).values(mailing_id=mailing_id))
    removed: list[int] = []

    def purge() -> None:
        with app.app_context():
            removed.append(mailing_purge.purge_old(utcnow() - timedelta(days=30)))

    purging = threading.Thread(target=purge)
    purging.start()
    purging.join(1.0)
    assert purging.is_alive()  # waiting for the append's lock
    appending.commit()
    appending.close()
    purging.join(30)
    assert removed == [0]
    assert count(Mailing) == 1 and count(MailingAttachment) == 1
