"""Pause and resume: the pause row, the commands, the workers that honour it, enqueueing on."""

import getpass
import time
from collections import Counter
from datetime import datetime

import pytest

from outbox import worker
from outbox.auth import tokens
from outbox.core.status import Status
from outbox.ops import pause
from tests.support import processes
from tests.support.api import VALID, auth
from tests.support.rows import enqueue_many, statuses
from tests.support.workers import OUTBOX, wait_until, worker_env

WHEN = datetime(2030, 1, 10, 12, 0, 0)


@pytest.mark.all_databases
def test_pause_keeps_the_first_pause_and_resume_lifts_it_once(app):
    assert pause.current() is None and not pause.is_paused()
    made, new = pause.pause("ann@example.com", "  relay maintenance  ", now=WHEN)
    assert new and (made.paused_by, made.paused_at, made.reason) == (
        "ann@example.com", WHEN, "relay maintenance")  # fmt: skip
    again, new = pause.pause("cli (bob)", "other reason")
    assert not new and (again.paused_by, again.reason) == ("ann@example.com", "relay maintenance")
    assert pause.is_paused()
    lifted = pause.resume()
    assert lifted is not None and lifted.paused_by == "ann@example.com"
    assert pause.resume() is None and not pause.is_paused()
    blank, _ = pause.pause("cli (bob)", "   ")
    assert blank.reason is None


def test_the_cli_says_who_when_and_why_and_resume_says_when_not_paused(runner, make_message):
    make_message()
    paused = runner.invoke(args=["pause", "--reason", "relay down"])
    assert paused.exit_code == 0, paused.output
    who = f"cli ({getpass.getuser()})"
    assert paused.output.startswith(f"sending is paused by {who} since 20")
    assert paused.output.rstrip().endswith("UTC: relay down")
    again = runner.invoke(args=["pause"])
    assert again.output.startswith(f"already paused by {who}")
    drained = runner.invoke(args=["send-queued"])
    assert drained.exit_code == 0 and "nothing sent" in drained.output
    assert statuses() == {Status.QUEUED: 1}
    resumed = runner.invoke(args=["resume"])
    assert resumed.exit_code == 0
    assert resumed.output.startswith(f"resumed: sending was paused by {who} since 20")
    idle = runner.invoke(args=["resume"])
    assert (idle.exit_code, idle.output) == (
        0,
        "not paused: sending was running, nothing to resume\n",
    )
    assert "Pause sending" in runner.invoke(args=["pause", "--help"]).output


class PausingWorker(worker.Worker):
    """Pauses sending while its first batch is in hand, as a pause from elsewhere would."""

    def send_batch(self, claims, claimed_at=None):  # type: ignore[no-untyped-def]
        pause.pause("ann@example.com", "mid-drain")
        return super().send_batch(claims, claimed_at)


def test_a_batch_in_hand_is_sent_and_recorded_and_no_more_is_claimed(smtp_app, smtp, make_message):
    smtp_app.config["BATCH_SIZE"] = 5
    for n in range(12):
        make_message(subject=f"n{n}")
    tally = PausingWorker().drain()
    assert (tally.sent, tally.paused) == (5, True)
    assert statuses() == {Status.SENT: 5, Status.QUEUED: 7}
    assert len(smtp.recorder.message_ids()) == 5
    assert worker.Worker().drain().sent == 0  # paused: a new pass claims nothing
    pause.resume()
    assert worker.Worker().drain().sent == 7
    assert statuses() == {Status.SENT: 12}


def test_enqueueing_goes_on_while_paused(client, app):
    token = tokens.create("shop")
    pause.pause("ann@example.com", "relay down")
    one = client.post("/api/messages", json=VALID, headers=auth(token))
    assert one.status_code == 201, one.get_json()
    batch = client.post("/api/messages/batch", json={"messages": [VALID, VALID]},
                        headers=auth(token))  # fmt: skip
    assert batch.status_code == 201, batch.get_json()
    assert statuses() == {Status.QUEUED: 3}


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_two_worker_processes_stop_claiming_while_paused_and_send_all_once_resumed(
    smtp_app, smtp, tmp_path
):
    poll = 0.5
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=poll, BATCH_SIZE=5)
    logs = [(tmp_path / f"worker-{n}.log").open("w") for n in range(2)]
    workers = [processes.start([*OUTBOX, "worker"], env=env, stderr=log) for log in logs]
    try:
        wait_until(lambda: _beating() == 2, timeout=processes.START_TIMEOUT)
        pause.pause("cli (test)", "two processes")
        time.sleep(poll * 1.5)  # a pass that began before the pause has ended by now
        expected = enqueue_many(20)
        time.sleep(poll * 2 + 0.5)  # two poll intervals and then some: nothing claimed
        assert statuses() == {Status.QUEUED: 20} and smtp.recorder.message_ids() == []
        assert all(w.poll() is None for w in workers)
        pause.resume()
        wait_until(lambda: statuses() == {Status.SENT: 20}, timeout=30)
        received = Counter(smtp.recorder.message_ids())
        assert sorted(received) == sorted(expected) and max(received.values()) == 1
        # Each says so at its first pass after the resume (one may have found nothing to send).
        wait_until(lambda: all("sending resumed" in _text(tmp_path, n) for n in range(2)), 10)
    finally:
        codes = [processes.end(w) for w in workers]
        for log in logs:
            log.close()
    texts = [_text(tmp_path, n) for n in range(2)]
    assert codes == [0, 0], texts
    for text in texts:  # said once each way, not every pass
        assert text.count("sending paused: not claiming until resumed") == 1, text
        assert text.count("sending resumed") == 1, text


def _text(tmp_path, n: int) -> str:  # type: ignore[no-untyped-def]
    return (tmp_path / f"worker-{n}.log").read_text()


def _beating() -> int:
    from sqlalchemy import func, select

    from outbox.models import WorkerBeat
    from outbox.models.db import db

    seen = db.session.scalar(select(func.count()).select_from(WorkerBeat))
    db.session.commit()
    return int(seen or 0)
