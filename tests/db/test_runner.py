"""The worker's scheduler as `outbox worker` sets it up: what an overrunning drain logs."""

import logging
import threading
from datetime import UTC, datetime, timedelta

from apscheduler.events import (
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_JOB_SUBMITTED,
    JobEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler

from outbox.worker import Worker, runner

OVERRUN = "maximum number of running instances reached"


def test_a_tick_skipped_while_the_drain_still_runs_is_logged_at_debug_not_warning(app, caplog):
    caplog.set_level(logging.DEBUG, logger="apscheduler.scheduler")
    scheduler = BackgroundScheduler(timezone="UTC")
    busy = runner.schedule(scheduler, app, Worker())
    running, skipped = threading.Event(), threading.Event()

    def heard(event: JobEvent) -> None:
        if event.job_id == "drain":
            (skipped if event.code == EVENT_JOB_MAX_INSTANCES else running).set()

    scheduler.add_listener(heard, EVENT_JOB_SUBMITTED | EVENT_JOB_MAX_INSTANCES)
    try:
        with busy:  # the pass in hand outlasts the interval: the tick waits on it
            scheduler.start()
            assert running.wait(30), "the drain did not start"
            scheduler.get_job("drain").modify(next_run_time=datetime.now(UTC))  # the next tick
            assert skipped.wait(30), "the next tick was not skipped"
    finally:
        scheduler.shutdown()  # after the pass it let go on
    levels = [r.levelno for r in caplog.records if OVERRUN in r.getMessage()]
    assert levels and set(levels) == {logging.DEBUG}, caplog.records


def test_a_tick_that_comes_late_still_drains_and_warns_of_nothing(app, caplog):
    app.config["POLL_INTERVAL"] = 60.0  # past the 5 s it is late by: no later tick stands in
    scheduler = BackgroundScheduler(timezone="UTC")
    runner.schedule(scheduler, app, Worker())
    outcomes: list[int] = []
    heard = threading.Event()

    def note(event: JobEvent) -> None:
        if event.job_id == "drain":
            outcomes.append(event.code)
            heard.set()

    scheduler.add_listener(note, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED)
    scheduler.start(paused=True)
    try:
        # The tick's time came 5 s ago: a machine too busy to run it then.
        scheduler.get_job("drain").modify(next_run_time=datetime.now(UTC) - timedelta(seconds=5))
        scheduler.resume()
        assert heard.wait(30), "the tick neither ran nor was missed"
    finally:
        scheduler.shutdown()
    assert outcomes[0] == EVENT_JOB_EXECUTED, outcomes
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
