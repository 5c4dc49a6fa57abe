"""Bulk jobs on every database: the filter's SQL finds what it says, and a job moves exactly
the matching messages, skips those that moved meanwhile, leaves out those stored after it
was asked for, and goes on from its last batch after a worker died."""

from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox.capabilities import bulk_jobs
from outbox.core.filters import parse
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import AuditEvent, BulkJob, utcnow
from outbox.models.db import db
from outbox.ops import reports
from tests.support.pages import move_to
from tests.support.rows import fresh

pytestmark = pytest.mark.all_databases
ALLOWANCE = 3


@pytest.fixture
def failed(make_message):
    """A failed message with these fields; its id."""

    def make(error: str = "550 5.2.2 mailbox full", **fields) -> int:  # type: ignore[no-untyped-def]
        return move_to(make_message(**fields), Status.FAILED, error)

    return make


def found(text: str) -> list[int]:
    page = reports.filter_page(parse(text), None)
    return sorted(m.id for m in page.rows)


def test_each_term_of_the_filter_finds_its_messages(app, make_message, failed):
    gmail = failed(to=["Ann <Ann@Gmail.com>"], subject="Invoice 12", metadata={"order": "4711"})
    shop = failed(from_addr="shop@shop.example", to=["bob@example.org"], error="421 busy")
    news = make_message(to=["carl@example.net"], stream=Stream.BROADCAST, subject="News").id
    assert found("to:@gmail.com") == [gmail]
    assert found("to:ann@gmail.com") == [gmail] and found("to:nn@gmail.com") == []
    assert found("from:@shop.example") == [shop] and found("from:SHOP@shop.example") == [shop]
    assert found("from:example.com") == [gmail, news] and found("from:hop@shop.example") == []
    assert found("status:failed") == [gmail, shop] and found("status:queued") == [news]
    assert found("stream:broadcast") == [news]
    assert found("subject:invoice") == [gmail] and found("invoice") == [gmail]
    assert found("source:test") == [gmail, shop, news] and found("source:tes") == []
    assert found("meta:order=4711") == [gmail] and found("meta:order=47") == []
    assert found('error:"mailbox full"') == [gmail] and found("error:busy") == [shop]
    assert found("since:1h") == [gmail, shop, news] and found("until:1h") == []
    assert found(f"until:{(utcnow() + timedelta(days=1)).date()}") == [gmail, shop, news]
    assert found("mailing:5") == []
    assert found("to:@gmail.com status:failed error:full") == [gmail]


def test_a_job_moves_exactly_the_matching_messages_and_leaves_the_others(app, make_message, failed):
    matching = [failed(to=[f"m{n}@gmail.com"]) for n in range(5)]
    elsewhere = failed(to=["x@example.com"])
    queued = make_message(to=["q@gmail.com"]).id
    job = bulk_jobs.start("resend", parse("to:@gmail.com"), "staff@example.com")
    assert bulk_jobs.work("w1", ALLOWANCE) >= 1
    done = bulk_jobs.job(job.id)
    assert (done.state, done.total, done.moved, done.skipped) == ("done", 5, 5, 0)
    assert [fresh(pk).status for pk in matching] == ["queued"] * 5
    assert fresh(elsewhere).status == "failed" and fresh(queued).status == "queued"
    actions = db.session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions[-2:] == ["bulk_job_resend", "bulk_job_resend_done"]
    assert bulk_jobs.outcome(done) == "5 messages queued again."


def test_a_job_skips_messages_that_moved_meanwhile_and_leaves_out_those_stored_after(
    app, make_message, failed, monkeypatch
):
    monkeypatch.setattr(bulk_jobs, "BATCH", 2)
    first = [failed(subject="late") for _ in range(6)]
    job = bulk_jobs.start("cancel", parse("subject:late"), "staff@example.com")
    later = make_message(subject="late").id  # queued, matching, but stored after the ask
    # the six failed ones are not cancellable; the queued one came after the ask
    held = bulk_jobs.claim("w1")
    assert held is not None and held.id == job.id
    assert bulk_jobs.step(held, ALLOWANCE) is False
    assert bulk_jobs.job(job.id).total == 0 and fresh(later).status == "queued"
    # a cancel of five queued: two moved to other statuses while it ran are skipped
    queued = [make_message(subject="soon").id for _ in range(5)]
    job = bulk_jobs.start("cancel", parse("subject:soon"), "staff@example.com")
    held = bulk_jobs.claim("w1")
    assert bulk_jobs.step(held, ALLOWANCE) is True  # counts 5, cancels the first 2
    move_to(fresh(queued[3]), Status.FAILED)  # moved meanwhile: out of the cancel's reach
    move_to(fresh(queued[4]), Status.SENT)
    while bulk_jobs.step(held, ALLOWANCE):
        pass
    done = bulk_jobs.job(job.id)
    assert (done.total, done.moved, done.skipped) == (5, 3, 2)
    assert [fresh(pk).status for pk in queued] == ["cancelled"] * 3 + ["failed", "sent"]
    assert "2 skipped" in bulk_jobs.outcome(done)
    assert {fresh(pk).status for pk in first} == {"failed"}


def test_a_job_whose_worker_died_goes_on_from_its_last_batch_once_its_lease_is_over(
    app, failed, monkeypatch
):
    monkeypatch.setattr(bulk_jobs, "BATCH", 2)
    ids = [failed(subject="lot") for _ in range(5)]
    job = bulk_jobs.start("resend", parse("subject:lot"), "staff@example.com")
    held = bulk_jobs.claim("w1")
    assert bulk_jobs.step(held, ALLOWANCE)  # w1 moves two, then stalls
    row = bulk_jobs.job(job.id)
    assert (row.state, row.moved, row.last_id) == ("running", 2, ids[1])
    w1 = BulkJob(id=row.id, move=row.move, filter=row.filter, ceiling=row.ceiling,
                 last_id=row.last_id, total=row.total, worker_id="w1")  # w1's own copy  # fmt: skip
    assert bulk_jobs.claim("w2") is None  # w1's lease still holds it
    later = utcnow() + bulk_jobs.LEASE + timedelta(seconds=1)
    taken = bulk_jobs.claim("w2", now=later)
    assert taken is not None and taken.worker_id == "w2"
    with pytest.raises(bulk_jobs.LeaseLost):  # w1, back, may not write a batch any more
        bulk_jobs.step(w1, ALLOWANCE)
    db.session.rollback()
    assert [fresh(pk).status for pk in ids] == ["queued"] * 2 + ["failed"] * 3
    while bulk_jobs.step(taken, ALLOWANCE):
        pass
    done = bulk_jobs.job(job.id)
    assert (done.state, done.total, done.moved, done.skipped) == ("done", 5, 5, 0)
    assert [fresh(pk).status for pk in ids] == ["queued"] * 5
    assert all(fresh(pk).max_attempts == fresh(pk).attempts + ALLOWANCE for pk in ids)


def test_a_job_keeps_its_times_as_they_were_when_asked(app, failed):
    old = failed(subject="old")
    job = bulk_jobs.start("resend", parse("since:1h"), "staff@example.com")
    stored = db.session.get(BulkJob, job.id)
    assert "1h" not in stored.filter and "since" in stored.filter
    bulk_jobs.work("w1", ALLOWANCE)
    assert fresh(old).status == "queued"
