"""A real `outbox worker` delivering webhooks: killed mid-delivery, its claim is taken back."""

import re
import signal
import subprocess
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox.capabilities.webhooks import endpoints, events, run_due, store
from outbox.models import WebhookDelivery, utcnow
from outbox.models.db import db
from tests.support import processes
from tests.support.receiver import Receiver
from tests.support.workers import OUTBOX, wait_until, worker_env


def ended_mid_delivery(smtp_app, smtp, tmp_path, receiver, how: int) -> int | None:  # type: ignore[no-untyped-def]
    """One event for the receiver; a real worker started, then ended by the signal how
    once the receiver has its request; the worker's exit code."""
    endpoint, receiver.secret = endpoints.add(receiver.url)
    events.emit(events.SENT, message_pk=1, message_id="<1@example.com>")
    db.session.commit()
    env = worker_env(smtp_app, smtp, tmp_path, WEBHOOK_ALLOW_PRIVATE="true",
                     WEBHOOK_INTERVAL=0.2, WEBHOOK_TIMEOUT=10)  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        worker = processes.start([*OUTBOX, "worker"], env=env, stderr=log)
        try:
            wait_until(lambda: receiver.requests, timeout=processes.START_TIMEOUT)
        finally:
            code = processes.end(worker, how)
    return code


@pytest.mark.all_databases
def test_a_worker_killed_mid_delivery_loses_nothing(smtp_app, smtp, tmp_path, db_kind):
    smtp_app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    receiver = Receiver(hang=3).start()  # the first request is in flight when the worker dies
    try:
        ended_mid_delivery(smtp_app, smtp, tmp_path, receiver, signal.SIGKILL)
        db.session.expire_all()
        row = db.session.scalars(select(WebhookDelivery)).one()
        assert row.status == "sending" and row.locked_by  # the dead worker's claim
        receiver.hang = 0
        lease = store.lease(10)
        assert run_due("alive", now=utcnow() + timedelta(seconds=lease / 2)).delivered == 0
        tally = run_due("alive", now=utcnow() + timedelta(seconds=lease + 1))
        assert (tally.reclaimed, tally.delivered) == (1, 1)
        time.sleep(3.2)  # the first request's answer comes late, to no one
        assert len(receiver.requests) == 2
        assert len(receiver.events) == 1  # the receiver dedupes on webhook-id
        assert receiver.requests[0].headers["webhook-id"] == receiver.requests[1].headers[
            "webhook-id"]  # fmt: skip
        db.session.expire_all()
        assert db.session.scalars(select(WebhookDelivery.status)).one() == "delivered"
    finally:
        receiver.stop()


def test_a_worker_stopped_mid_delivery_writes_its_outcome_before_it_exits(smtp_app, smtp, tmp_path):
    smtp_app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    receiver = Receiver(hang=1.5).start()
    try:
        code = ended_mid_delivery(smtp_app, smtp, tmp_path, receiver, signal.SIGTERM)
        assert code == 0, (tmp_path / "worker.log").read_text()
        db.session.expire_all()
        row = db.session.scalars(select(WebhookDelivery)).one()
        assert (row.status, row.response_code, row.locked_by) == ("delivered", 204, None)
        assert len(receiver.requests) == 1
    finally:
        receiver.stop()


@pytest.mark.all_databases
def test_processes_delivering_side_by_side_send_each_delivery_once(app, smtp, tmp_path, db_kind):
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    receiver = Receiver().start()
    try:
        endpoint, receiver.secret = endpoints.add(receiver.url)
        count = 300
        events.emit_many([events.Event(events.SENT, n, f"<{n}@x>") for n in range(count)])
        db.session.commit()
        env = worker_env(app, smtp, tmp_path, WEBHOOK_ALLOW_PRIVATE="true")
        runs = [processes.start([*OUTBOX, "webhook", "deliver"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for _ in range(3)]  # fmt: skip
        outputs = [run.communicate(timeout=120)[0].decode() for run in runs]
        assert [run.returncode for run in runs] == [0, 0, 0], outputs
        delivered = [int(re.search(r"delivered (\d+)", out).group(1)) for out in outputs]  # type: ignore[union-attr]
        errors = db.session.scalars(select(WebhookDelivery.error).where(
            WebhookDelivery.status != "delivered")).all()  # fmt: skip
        assert sum(delivered) == count, (outputs, errors)
        assert len(receiver.requests) == count and receiver.duplicates == 0
        assert len(receiver.events) == count and receiver.refused == []
        db.session.expire_all()
        assert set(db.session.scalars(select(WebhookDelivery.status))) == {"delivered"}
    finally:
        receiver.stop()
