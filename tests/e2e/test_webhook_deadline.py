"""A webhook receiver answering a byte a second: cut off at the timeout, nothing left behind."""

import os
import signal
import subprocess
import threading
from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import select

from outbox.capabilities.webhooks import endpoints, events, run_due
from outbox.models import WebhookDelivery
from outbox.models.db import db
from tests.support import processes
from tests.support.trickle import Trickler
from tests.support.workers import OUTBOX, worker_env


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    found = Trickler.start()
    yield found
    found.stop()


@pytest.fixture
def hooks_app(app: Flask) -> Flask:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the receiver is on loopback
    app.config["WEBHOOK_TIMEOUT"] = 2.0
    return app


def queued(trickler: Trickler, count: int) -> None:
    endpoints.add(trickler.url)
    events.emit_many([events.Event(events.SENT, n, f"<{n}@x>") for n in range(count)])
    db.session.commit()


def deliveries() -> list[WebhookDelivery]:
    db.session.expire_all()
    return list(db.session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def open_sockets() -> set[str]:
    """This process's sockets, by inode ("socket:[123]")."""
    links = {_link(fd) for fd in os.listdir("/proc/self/fd")}
    return {link for link in links if link.startswith("socket:")}


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the listing's own descriptor, closed since
        return ""


def test_a_trickling_receiver_is_cut_off_and_leaves_no_thread_or_socket(hooks_app, trickler):
    queued(trickler, 3)
    threads, sockets = set(threading.enumerate()), open_sockets()
    tally = run_due("w")
    assert (tally.delivered, tally.retrying) == (0, 3)
    trickler.wait_connected(3)
    assert set(threading.enumerate()) - threads == set()  # every request's thread has ended
    assert open_sockets() - sockets == set()  # and every request's socket is closed
    why = f"no complete answer from 127.0.0.1:{trickler.port} within 2s"
    for row in deliveries():
        assert (row.status, row.attempts, row.error) == ("pending", 1, why)
        assert row.latency_ms is not None and row.latency_ms < 2000 + 3000  # not 40 s of bytes


def test_webhook_deliver_exits_though_the_receiver_trickles(hooks_app, smtp, tmp_path, trickler):
    queued(trickler, 1)
    env = worker_env(hooks_app, smtp, tmp_path, WEBHOOK_ALLOW_PRIVATE="true", WEBHOOK_TIMEOUT=2)
    run = processes.start([*OUTBOX, "webhook", "deliver"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        out = run.communicate(timeout=60)[0].decode()
    finally:
        processes.kill_group(run)
    assert run.returncode == 0, out
    assert "delivered 0, to retry 1" in out
    [row] = deliveries()
    assert row.status == "pending" and "within 2s" in (row.error or "")


def test_a_worker_stops_at_sigterm_while_a_delivery_trickles(hooks_app, smtp, tmp_path, trickler):
    queued(trickler, 1)
    env = worker_env(hooks_app, smtp, tmp_path, WEBHOOK_ALLOW_PRIVATE="true",
                     WEBHOOK_INTERVAL=0.2, WEBHOOK_TIMEOUT=120)  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        worker = processes.start([*OUTBOX, "worker"], env=env, stderr=log)
        try:
            trickler.wait_connected(1)
        finally:
            code = processes.end(worker, signal.SIGTERM, timeout=30)  # far within the 120 s
    assert code == 0, (tmp_path / "worker.log").read_text()
    [row] = deliveries()
    assert (row.status, row.attempts, row.locked_by) == ("pending", 1, None)
    assert row.error == (f"cut off before 127.0.0.1:{trickler.port} answered in full: "
                         "the worker is stopping")  # fmt: skip
