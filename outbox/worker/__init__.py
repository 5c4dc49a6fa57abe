"""The worker's drain pass: claim due messages, send them, record what came of each."""

import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from flask import current_app

from outbox import queue
from outbox.capabilities import routes
from outbox.capabilities.guardrails import pauses as guardrails
from outbox.capabilities.suppression import screen
from outbox.core.status import Lease
from outbox.core.streams import Stream
from outbox.models import utcnow
from outbox.models.db import db
from outbox.ops import heartbeats, metrics, pause
from outbox.worker.batch import BatchSender, through_outage
from outbox.worker.connections import Pools
from outbox.worker.tally import Tally

log = logging.getLogger("outbox.worker")

# How long a pass keeps trying when a claim comes back empty while due rows are
# still waiting (another worker's claim is in flight or was just rolled back).
EMPTY_CLAIM_PATIENCE = 2.0  # seconds
# A busy worker beats at most this often (seconds), not after every batch.
BEAT_EVERY = 1.0
# The smallest batch a lane claims when BATCH_SIZE is shared among many lanes.
MIN_LANE_BATCH = 20
# The lane kept for transactional mail claims as much broadcast mail as it sent in this
# many seconds at the pace of its last batch (one message before it has sent one), so a
# transactional mail waits about that long there; and, while other lanes still send,
# it looks for new transactional mail this often (seconds).
KEPT_WITHIN = 0.25
KEPT_LOOKS_EVERY = 0.2


def new_worker_id() -> str:
    """host:pid:random, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Worker(BatchSender):
    """One worker's identity, settings and stop flag; drain() is a whole pass."""

    worker_id: str = field(default_factory=new_worker_id)
    stop: threading.Event = field(default_factory=threading.Event)
    started_at: datetime = field(default_factory=utcnow)
    failing: bool = False  # a fault is on the record (heartbeats.fault) and not cleared yet
    paused: bool = False  # the last pass found sending paused (logged once, not every pass)
    # The last pass ended without an error: it holds no claim (else queue.release_held).
    tidy: bool = False
    beaten_at: float = -math.inf  # time.monotonic() of the last heartbeat, and of the last
    reclaimed_at: float = -math.inf  # taking back of dead workers' claims
    # Its lines carry worker_id as a field of their own (a JSON log's key).
    log: logging.LoggerAdapter = field(init=False, repr=False)  # type: ignore[type-arg]
    lane: threading.local = field(default_factory=threading.local, repr=False)

    def __post_init__(self) -> None:
        self.log = logging.LoggerAdapter(log, {"worker_id": self.worker_id})

    def drain(self) -> Tally:
        """Send every due message, then return what happened (app context needed).

        Each lane (a thread; the caller's own when there is one) claims, sends and
        records batches of its own, so that a process keeps as many SMTP connections
        busy as its routes allow (Route.max_connections) instead of waiting on one
        connection's round trips. A claim is one lane's alone from claim to record,
        as it was one process's: the guarantees of queue.claims hold per claim.
        """
        lease = Lease.from_config(current_app.config)
        started = time.monotonic()
        # A worker woken for each new message passes many times a tick: what a pass
        # does first is done when due, so the message is not kept waiting on it.
        if started - self.beaten_at >= BEAT_EVERY:
            heartbeats.beat(self.worker_id, self.started_at, 0)
            self.beaten_at = started
        if not self.tidy:
            released = queue.release_held(self.worker_id)
            if released:
                self.log.warning("%s: handed back %d claims an earlier pass left",
                                 self.worker_id, released)  # fmt: skip
        self.tidy = False  # until this pass ends without an error
        reclaimed = 0
        if started - self.reclaimed_at >= min(current_app.config["POLL_INTERVAL"],
                                              lease.reclaim_every):  # fmt: skip
            reclaimed = queue.release_stale(lease.lock_timeout)
            self.reclaimed_at = started
        run = Pass(self, lease, Tally(reclaimed=reclaimed))
        lanes = routes.table().lanes
        size = current_app.config["BATCH_SIZE"]
        run.batch = min(size, max(MIN_LANE_BATCH, math.ceil(size / lanes)))
        with Pools() as self.pools:
            try:
                self._run_lanes(run, lanes)
            finally:
                self.pools = None
        if run.unbeaten:
            heartbeats.beat(self.worker_id, self.started_at, run.unbeaten)
            self.beaten_at = time.monotonic()
        self.tidy = True
        tally = run.tally
        if tally.paused != self.paused:
            self.paused = tally.paused
            said = "paused: not claiming until resumed" if self.paused else "resumed"
            self.log.info("%s: sending %s", self.worker_id, said)
        metrics.count_outcomes(["worker_lost"] * tally.reclaimed, ())
        summary = tally.summary(time.monotonic() - started)
        if summary:
            self.log.info("%s: %s", self.worker_id, summary)
        return tally

    def _run_lanes(self, run: "Pass", lanes: int) -> None:
        """Run the pass's lanes to their end; the first error of any lane is raised.

        The first lane is kept for transactional mail: it takes broadcast mail only in
        batches it sends within about KEPT_WITHIN, and waits for transactional mail as long
        as the others send, so a password reset never queues behind a newsletter's batches.
        """
        if lanes == 1:
            self._lane(run, kept=True)
            return
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        errors: list[BaseException] = []
        run.others = lanes - 1

        def lane(kept: bool) -> None:
            with app.app_context():
                try:
                    self._lane(run, kept)
                except BaseException as exc:
                    errors.append(exc)
                    run.ended.set()
                finally:
                    if not kept:
                        run.lane_done()
                    db.session.remove()

        threads = [threading.Thread(target=lane, args=(n == 0,), name=f"lane-{n}", daemon=True)
                   for n in range(lanes)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _lane(self, run: "Pass", kept: bool = False) -> None:
        """Claim, send and record batches until nothing is due, the pass ends, or a stop;
        kept: the lane kept for transactional mail (_run_lanes)."""
        idle_since: float | None = None
        pace = 0.0  # the kept lane's mails a second in its last batch
        while not (self.stop.is_set() or run.ended.is_set()):
            run.chores()
            if pause.is_paused():  # each batch: a long drain stops within a poll interval too
                run.tally.paused = True
                run.ended.set()
                break
            share = max(1, min(run.batch, int(KEPT_WITHIN * pace)))
            caps = {Stream.BROADCAST: share} if kept else None
            held = guardrails.held()  # domains whose broadcast mail a guardrail paused
            claims = queue.claim_batch(self.worker_id, run.batch, with_mail=True, caps=caps,
                                       held=held)  # fmt: skip
            if claims:
                idle_since = None
                claimed_at = time.monotonic()
                batch = self.send_batch(self._screen(claims), claimed_at)
                pace = len(claims) / max(time.monotonic() - claimed_at, 1e-3)
                run.add(batch)
                if batch.fault:
                    # The next messages would meet it too; the next pass tries again.
                    self.log.warning("%s: sending is failing: %s", self.worker_id, batch.fault)
                    run.ended.set()
                continue
            if kept and run.others_sending():
                self.stop.wait(KEPT_LOOKS_EVERY)
                continue
            # An empty claim is not an empty queue: rows may sit under another
            # worker's claim that is about to be rolled back. Messages a rate limit held
            # back (throttle) come due again within moments: while there are, wait for them.
            ahead = timedelta(seconds=EMPTY_CLAIM_PATIENCE if run.tally.held else 0)
            if not queue.has_due(utcnow() + ahead, held=held):
                break
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > EMPTY_CLAIM_PATIENCE:
                break
            time.sleep(0.05)

    def _screen(self, claims: list[queue.Claim]) -> list[queue.Claim]:
        """The claims with recipients suppressed since they were queued marked; on an
        error the claims go back at once, not after the lease."""
        try:
            return screen.at_send(claims, utcnow())
        except Exception:
            db.session.rollback()
            through_outage(queue.release, claims)
            raise


class Pass:
    """One drain pass as its lanes share it: the tally, the end, and the chores one lane does."""

    def __init__(self, worker: Worker, lease: Lease, tally: Tally) -> None:
        self.worker, self.lease, self.tally = worker, lease, tally
        self.batch = 1  # messages a lane claims at a time
        self.ended = threading.Event()
        self.lock = threading.Lock()
        self.chore = threading.Lock()
        self.reclaimed_at = self.beaten_at = time.monotonic()
        self.unbeaten = 0  # sent since the last heartbeat
        self.others = 0  # lanes beside the kept one that have not ended yet

    def lane_done(self) -> None:
        """A lane other than the kept one has ended."""
        with self.lock:
            self.others -= 1

    def others_sending(self) -> bool:
        """Whether a lane other than the kept one is still at work."""
        with self.lock:
            return self.others > 0

    def add(self, batch: Tally) -> None:
        """Count a lane's batch, and put a fault on record (or take it off)."""
        worker = self.worker
        with self.lock:
            self.tally.add(batch)
            self.unbeaten += batch.sent
            if batch.fault or (batch.sent and worker.failing):
                worker.failing = heartbeats.fault(worker.worker_id, worker.started_at, batch.fault)

    def chores(self) -> None:
        """Take back dead workers' claims and beat, when due; by one lane at a time."""
        if not self.chore.acquire(blocking=False):
            return
        try:
            worker, now = self.worker, time.monotonic()
            if now - self.reclaimed_at > self.lease.reclaim_every:
                # Also within a pass: draining a backlog can take hours, and a dead
                # worker's claims would wait for all of it.
                self.tally.reclaimed += queue.release_stale(self.lease.lock_timeout)
                self.reclaimed_at = now
            if now - self.beaten_at >= BEAT_EVERY:
                with self.lock:
                    sent, self.unbeaten = self.unbeaten, 0
                heartbeats.beat(worker.worker_id, worker.started_at, sent)
                self.beaten_at = now
        finally:
            self.chore.release()
