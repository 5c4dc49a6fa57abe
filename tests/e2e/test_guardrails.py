"""Guardrails across processes: a worker process sends, the bounce listener takes the
bounces, the worker pauses the domain's broadcast mail and sends the rest, a resume frees it."""

import smtplib

import pytest
from sqlalchemy import select

from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import DomainPause
from outbox.models.db import db
from tests.support import bouncemail, processes
from tests.support.bouncemail import BOUNCES
from tests.support.rows import fresh
from tests.support.workers import OUTBOX, wait_until, worker_env

NEWS = "news.example"


def paused_now() -> list[str]:
    db.session.expire_all()
    stmt = select(DomainPause.domain).where(DomainPause.paused_at.is_not(None))
    found = list(db.session.scalars(stmt))
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_bounces_through_the_listener_pause_the_domains_broadcast_mail_in_the_worker(
    smtp_app, smtp, make_message, listener, tmp_path, runner
):
    env = worker_env(smtp_app, smtp, tmp_path, SECRET_KEY=smtp_app.secret_key,
                     BOUNCE_ADDRESS=BOUNCES, COUNT_INTERVAL=0.2, POLL_INTERVAL=0.2,
                     GUARDRAIL_MIN_RECIPIENTS=10)  # fmt: skip
    log = tmp_path / "worker.log"
    letters = [make_message(from_addr=f"letters@{NEWS}", to=[f"r{n}@example.org"],
                            stream=Stream.BROADCAST) for n in range(10)]  # fmt: skip
    with log.open("w") as err, processes.group([*OUTBOX, "worker"], env=env, stderr=err):
        wait_until(lambda: len(smtp.received) == 10, timeout=processes.START_TIMEOUT)
        assert paused_now() == []  # 10 sent, nothing back: every rate is 0
        paths = {m.rcpt_tos[0]: m.mail_from for m in smtp.received}
        for message in letters[:2]:  # 2 hard bounces of 10: 20%, over 5%
            to = message.recipients[0].address
            raw = bouncemail.postfix(paths[to], to, message.message_id)
            with smtplib.SMTP("127.0.0.1", listener, timeout=10) as client:
                client.sendmail("", [paths[to]], raw)
        # The worker's log line comes once its claims hold the domain.
        wait_until(lambda: f"broadcast mail from {NEWS} paused" in log.read_text(), timeout=30)
        assert paused_now() == [NEWS]
        held = make_message(from_addr=f"letters@{NEWS}", to=["late@example.org"],
                            stream=Stream.BROADCAST)  # fmt: skip
        reset = make_message(from_addr=f"reset@{NEWS}", to=["ann@example.org"])
        other = make_message(from_addr="letters@other.example", to=["bob@example.org"],
                             stream=Stream.BROADCAST)  # fmt: skip
        wait_until(lambda: {fresh(reset.id).status, fresh(other.id).status} == {Status.SENT},
                   timeout=30)  # fmt: skip
        assert fresh(held.id).status == Status.QUEUED
        resumed = runner.invoke(args=["guardrails", "resume", NEWS])
        assert resumed.output == f"resumed broadcast mail from {NEWS}\n"
        wait_until(lambda: fresh(held.id).status == Status.SENT, timeout=30)
    assert "checking the guardrails failed" not in log.read_text()
