"""A bulk job over 100,000 matching messages, run by a worker process on MariaDB: every
matching message moved, none of the others, none stored after the ask."""

import signal

import pytest
import sqlalchemy as sa

from outbox.capabilities import bulk_jobs
from outbox.core.addresses import Kind
from outbox.core.filters import parse
from outbox.core.recipients import Recipient
from outbox.core.status import Status
from outbox.models import BulkJob, Message, utcnow
from outbox.models.db import db
from outbox.ops import pause
from tests.support import processes
from tests.support.workers import OUTBOX, wait_until, worker_env

MATCHING, OTHERS = 100_000, 1_000
CHUNK = 5_000


def stored(template: dict, first: int, count: int, **values: object) -> None:  # type: ignore[type-arg]
    """count copies of a message row, inserted in bulk with SQL, numbered from first."""
    table = Message.__table__
    for start in range(first, first + count, CHUNK):
        rows = [{**template, "message_id": f"<bulk-{n}@example.com>", **values}
                for n in range(start, min(start + CHUNK, first + count))]  # fmt: skip
        db.session.execute(sa.insert(table), rows)
        db.session.commit()


def by_status(**where: object) -> dict[str, int]:
    db.session.expire_all()
    stmt = sa.select(Message.status, sa.func.count()).filter_by(**where).group_by(Message.status)
    found = dict(db.session.execute(stmt).all())
    db.session.commit()
    return found


@pytest.mark.slow
@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_a_job_over_100000_failed_messages_resends_exactly_those_while_a_worker_runs(
    app, make_message, smtp, tmp_path
):
    now = utcnow()
    row = make_message(to=["one@gmail.com"])
    template = {c.name: getattr(row, c.key) for c in Message.__table__.columns if c.name != "id"}
    template["part"] = ""  # a server default, not loaded on the row
    db.session.execute(sa.delete(Message))
    db.session.commit()
    failed = dict(template, status=Status.FAILED.value, attempts=1, max_attempts=1,
                  last_error="550 5.2.2 mailbox full", settled_at=now, subject="bulk")  # fmt: skip
    stored(failed, 0, MATCHING, source="test:gmail")
    stored(dict(failed, source="test:other", recipients=_to("x@example.com")), MATCHING, OTHERS)
    stored(dict(failed, source="test:sent", status=Status.SENT.value), MATCHING + OTHERS, OTHERS)
    pause.pause("test", "the resent mail is not to be sent here")  # the drain waits; jobs run
    job = bulk_jobs.start("resend", parse("to:@gmail.com status:failed"), "staff@example.com")
    stored(dict(failed, source="test:later"), MATCHING + 2 * OTHERS, OTHERS)  # after the ask
    env = worker_env(app, smtp, tmp_path, POLL_INTERVAL=0.2)
    with (tmp_path / "worker.log").open("wb") as log:
        worker = processes.start([*OUTBOX, "worker"], env=env, stderr=log)
        try:
            wait_until(lambda: _state(job.id) in ("done", "failed"), timeout=300)
        finally:
            code = processes.end(worker, signal.SIGTERM, timeout=60)
    assert code == 0, (tmp_path / "worker.log").read_text()
    done = bulk_jobs.job(job.id)
    assert (done.state, done.total, done.moved, done.skipped) == ("done", MATCHING, MATCHING, 0)
    assert by_status(source="test:gmail") == {"queued": MATCHING}
    assert by_status(source="test:other") == {"failed": OTHERS}
    assert by_status(source="test:sent") == {"sent": OTHERS}
    assert by_status(source="test:later") == {"failed": OTHERS}


def _to(address: str) -> list[Recipient]:
    return [Recipient(address=address, name="", kind=Kind.TO)]


def _state(job_id: int) -> str:
    state = db.session.scalar(sa.select(BulkJob.state).where(BulkJob.id == job_id))
    db.session.commit()
    return str(state)
