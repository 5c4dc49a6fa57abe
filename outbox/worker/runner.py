"""Running workers: the APScheduler process of one worker, and several side by side."""

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from flask import Flask

from outbox.capabilities import bulk_jobs, retention, routes, webhooks
from outbox.capabilities.bounces import imap
from outbox.capabilities.capture import transport as capture
from outbox.capabilities.guardrails import pauses as guardrails
from outbox.models.db import db
from outbox.ops import rollups
from outbox.worker import Worker
from outbox.worker.pickup import Pickup

log = logging.getLogger("outbox.worker")
STOPS = {signal.SIGTERM, signal.SIGINT}
RETENTION_EVERY = 3600.0  # seconds between asking whether the daily purge is due


def catch_stops() -> None:
    """Keep SIGTERM and SIGINT for sigwait: blocked here and in every thread started later.

    A Python handler runs only in the main thread: a signal the kernel handed to the busy
    drain thread waited until the scheduler's next wake-up, up to POLL_INTERVAL, while
    the pass went on claiming batches. SIGINT's handler is set explicitly because a
    process started in the background of a script (`outbox worker &`, `make test &`)
    inherits it ignored, and POSIX lets a system discard an ignored signal even while
    it is blocked: the documented stop must not depend on how the process was started.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)


class OverrunsQuiet(logging.Filter):
    """APScheduler's line for a tick skipped while the job's last run goes on, at DEBUG.

    A drain that outlasts POLL_INTERVAL (a backlog, a slow server) is the worker at work,
    not a fault: at WARNING it would fill the log with a line every interval it runs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if "maximum number of running instances reached" not in str(record.msg):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


OVERRUNS_QUIET = OverrunsQuiet()


def drain_pass(app: Flask, worker: Worker, busy: threading.Lock) -> Callable[[], None]:
    """A whole drain pass, one at a time (busy held while it runs), none after a stop."""

    def tick() -> None:
        with busy, app.app_context():
            if worker.stop.is_set():
                return
            try:
                worker.drain()
            except Exception:
                # A database or network outage ends this pass; the next tick retries.
                worker.log.exception("%s: drain pass failed", worker.worker_id)
            finally:
                db.session.remove()

    return tick


def bulk_work(app: Flask, worker: Worker) -> Callable[[], None]:
    """Run the bulk jobs waiting (capabilities.bulk_jobs) until none is left or a stop."""

    def run_jobs() -> None:
        with app.app_context():
            try:
                bulk_jobs.work(worker.worker_id, app.config["MAX_ATTEMPTS"], worker.stop)
            except Exception:  # an outage: the job's lease runs out and the next run goes on
                worker.log.exception("%s: bulk job failed", worker.worker_id)

    return run_jobs


def schedule(scheduler: BaseScheduler, app: Flask, worker: Worker) -> threading.Lock:
    """Add the drain and the full count per status; the lock returned is held while a pass runs."""
    logging.getLogger("apscheduler.scheduler").addFilter(OVERRUNS_QUIET)  # once: same filter
    busy = threading.Lock()
    tick = drain_pass(app, worker, busy)

    def purge() -> None:
        with app.app_context():
            retention.purge_if_due(worker.worker_id)

    def count() -> None:
        with app.app_context():  # its teardown ends the session
            rollups.count_if_due(worker.worker_id)
            guardrails.check_if_due(worker.worker_id)

    # A tick that comes late (a busy machine) still drains: APScheduler would skip it
    # with a warning past its default grace of a second.
    scheduler.add_job(
        tick, "interval", seconds=app.config["POLL_INTERVAL"], id="drain",
        max_instances=1, coalesce=True, misfire_grace_time=None, next_run_time=datetime.now(UTC),
    )  # fmt: skip
    # In a thread of its own, beside the drain. Of many workers the first whose turn
    # comes counts; the jitter keeps them from all finding the count due at once.
    interval = app.config["COUNT_INTERVAL"]
    scheduler.add_job(
        count, "interval", seconds=interval, jitter=interval / 4, id="counts",
        max_instances=1, coalesce=True, next_run_time=datetime.now(UTC),
    )  # fmt: skip
    # bulk jobs: a staff move over every message a filter finds, batch after batch, in a
    # thread of its own so that the drain goes on beside it.
    scheduler.add_job(
        bulk_work(app, worker), "interval", seconds=app.config["POLL_INTERVAL"], id="bulk_jobs",
        max_instances=1, coalesce=True, misfire_grace_time=None, next_run_time=datetime.now(UTC),
    )  # fmt: skip
    # retention: hourly, each worker asks; once a day one takes the purge's turn.
    scheduler.add_job(
        purge, "interval", seconds=RETENTION_EVERY, jitter=RETENTION_EVERY / 4, id="retention",
        max_instances=1, coalesce=True, next_run_time=datetime.now(UTC) + timedelta(seconds=30),
    )  # fmt: skip
    if app.config.get("BOUNCE_IMAP_URL"):  # bounces: the bounce mailbox's poll
        imap.schedule(scheduler, app, worker.worker_id)
    webhooks.schedule(scheduler, app, worker)
    return busy


def run(app: Flask) -> None:
    """Drain now and then every POLL_INTERVAL seconds until SIGTERM or SIGINT."""
    worker = Worker()
    scheduler = BackgroundScheduler(timezone="UTC")
    busy = schedule(scheduler, app, worker)
    pickup = Pickup(app, drain_pass(app, worker, busy), busy, worker.stop)
    catch_stops()  # before the scheduler and the pickup start their threads
    worker.log.info("%s: polling every %gs%s", worker.worker_id, app.config["POLL_INTERVAL"],
                    pickup.says() if app.config["WAKE_UPS"] else ", wake-ups off")  # fmt: skip
    webhooks.warn_unsafe(app.config)
    routes.warn_unsafe(app)  # each route of OUTBOX_ROUTES, else the OUTBOX_MAIL_* server
    capture.warn_mode(app.config)  # staging: mail kept, not sent
    scheduler.start()
    if app.config["WAKE_UPS"]:
        pickup.start()
    signum = signal.sigwait(STOPS)
    worker.log.info("%s: %s received, stopping", worker.worker_id, signal.Signals(signum).name)
    worker.stop.set()
    pickup.close()
    scheduler.shutdown(wait=False)
    with busy:  # let the message in hand finish and the rest be handed back
        pass
    with app.app_context():
        guardrails.flush_safely(worker.worker_id)
    worker.log.info("%s: stopped", worker.worker_id)


def _die_with(parent: int) -> None:
    """In a child, before exec (Linux): SIGTERM when the process that started it dies.

    A supervisor killed outright would otherwise leave its workers running unwatched.
    One killed between the fork and this call is already gone, and the signal would
    never come: the child then ends itself.
    """
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def run_many(count: int, restart_after: float = 1.0) -> int:
    """Run count worker processes until SIGTERM or SIGINT; the exit code of the stop.

    Each is a whole `outbox worker` of its own (its own connections, claims and
    heartbeat), started with this process's environment and settings. One that dies
    is started again; a stop is passed on to all of them and waited for.
    """
    command = [sys.executable, "-m", "outbox", "worker"]
    catch_stops()
    me = os.getpid()
    tie = (lambda: _die_with(me)) if sys.platform == "linux" else None
    children = [subprocess.Popen(command, preexec_fn=tie) for _ in range(count)]
    log.info("started %d worker processes: %s", count, [c.pid for c in children])
    while True:
        found = signal.sigtimedwait(STOPS, restart_after)
        if found is not None:
            log.info("%s received, stopping %d worker processes",
                     signal.Signals(found.si_signo).name, count)  # fmt: skip
            break
        for n, child in enumerate(children):
            if child.poll() is not None:
                log.error("worker process %d exited with %s; starting another",
                          child.pid, child.returncode)  # fmt: skip
                children[n] = subprocess.Popen(command, preexec_fn=tie)
    for child in children:
        child.send_signal(signal.SIGTERM)
    codes = [child.wait() for child in children]
    log.info("worker processes stopped: exit codes %s", codes)
    return max(codes, key=abs)
