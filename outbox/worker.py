"""The worker's drain pass: claim due messages, send them, record what came of each."""

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from flask import current_app
from sqlalchemy.exc import InterfaceError, OperationalError

from . import deliveries, heartbeats, metrics, mime, pause, queue, routes, sender, throttle
from .bounces import verp
from .extensions import db
from .models import utcnow
from .status import Lease, Outcome, Retry, Status
from .suppression import screen
from .tally import Tally

log = logging.getLogger("outbox.worker")

# How long a pass keeps trying when a claim comes back empty while due rows are
# still waiting (another worker's claim is in flight or was just rolled back).
EMPTY_CLAIM_PATIENCE = 2.0  # seconds
# A busy worker beats at most this often (seconds), not after every batch.
BEAT_EVERY = 1.0


def new_worker_id() -> str:
    """host:pid:random, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _through_outage(write, *args):  # type: ignore[no-untyped-def]
    """Run a claim-guarded write, waiting out a database outage for up to LOCK_TIMEOUT.

    The worker alone knows what became of the messages it holds; giving up on the
    first error would leave them claimed until LOCK_TIMEOUT and send the one just
    delivered again. The writes are guarded by the claim, so repeating one whose
    commit did land changes nothing.
    """
    deadline = time.monotonic() + current_app.config["LOCK_TIMEOUT"]
    delay = 0.1
    while True:
        try:
            return write(*args)
        except (OperationalError, InterfaceError) as exc:
            db.session.rollback()
            if time.monotonic() + delay > deadline:
                raise
            log.warning("database unavailable, retrying in %.1fs: %s", delay, exc.orig)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


@dataclass
class Worker:
    """One worker's identity, settings and stop flag; drain() is a whole pass."""

    worker_id: str = field(default_factory=new_worker_id)
    stop: threading.Event = field(default_factory=threading.Event)
    started_at: datetime = field(default_factory=utcnow)
    failing: bool = False  # a fault is on the record (heartbeats.fault) and not cleared yet
    paused: bool = False  # the last pass found sending paused (logged once, not every pass)
    delays: list[float] = field(default_factory=list)  # due to SMTP, not yet in metrics
    # Its lines carry worker_id as a field of their own (a JSON log's key).
    log: logging.LoggerAdapter = field(init=False, repr=False)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        self.log = logging.LoggerAdapter(log, {"worker_id": self.worker_id})

    def drain(self) -> Tally:
        """Send every due message, then return what happened (app context needed)."""
        config = current_app.config
        lease = Lease.from_config(config)
        started = time.monotonic()
        heartbeats.beat(self.worker_id, self.started_at, 0)
        released = queue.release_held(self.worker_id)
        if released:
            self.log.warning("%s: handed back %d claims an earlier pass left",
                             self.worker_id, released)  # fmt: skip
        tally = Tally(reclaimed=queue.release_stale(lease.lock_timeout))
        idle_since: float | None = None
        reclaimed_at = beaten_at = time.monotonic()
        unbeaten = 0  # sent since the last heartbeat
        while not self.stop.is_set():
            if time.monotonic() - reclaimed_at > lease.reclaim_every:
                # Also within a pass: draining a backlog can take hours, and a dead
                # worker's claims would wait for all of it.
                tally.reclaimed += queue.release_stale(lease.lock_timeout)
                reclaimed_at = time.monotonic()
            if pause.is_paused():  # each batch: a long drain stops within a poll interval too
                tally.paused = True
                break
            claims = queue.claim_batch(self.worker_id, config["BATCH_SIZE"], with_mail=True)
            if claims:
                idle_since = None
                claims = self._screen(claims)
                batch = self.send_batch(claims)
                tally.add(batch)
                unbeaten += batch.sent
                if batch.fault or (batch.sent and self.failing):
                    self.failing = heartbeats.fault(self.worker_id, self.started_at, batch.fault)
                if batch.fault:
                    # The next messages would meet it too; the next pass tries again.
                    self.log.warning("%s: sending is failing: %s", self.worker_id, batch.fault)
                    break
                if time.monotonic() - beaten_at >= BEAT_EVERY:
                    heartbeats.beat(self.worker_id, self.started_at, unbeaten)
                    unbeaten, beaten_at = 0, time.monotonic()
                continue
            # An empty claim is not an empty queue: rows may sit under another
            # worker's claim that is about to be rolled back.
            if not queue.has_due():
                break
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > EMPTY_CLAIM_PATIENCE:
                break
            time.sleep(0.05)
        if unbeaten:
            heartbeats.beat(self.worker_id, self.started_at, unbeaten)
        if tally.paused != self.paused:
            self.paused = tally.paused
            said = "paused: not claiming until resumed" if self.paused else "resumed"
            self.log.info("%s: sending %s", self.worker_id, said)
        metrics.count_outcomes(["worker_lost"] * tally.reclaimed, ())  # metrics (issue 14)
        summary = tally.summary(time.monotonic() - started)
        if summary:
            self.log.info("%s: %s", self.worker_id, summary)
        return tally

    def send_batch(self, claims: list[queue.Claim]) -> Tally:
        """Send claimed messages over one connection, recording outcomes in groups.

        At most RECORD_EVERY outcomes wait unwritten, and none longer than
        RECORD_AFTER: a worker that dies sends at most that many messages again.
        Every outcome is written before the claims are renewed, so while its claim holds.
        """
        config = current_app.config
        retry, lease = Retry.from_config(config), Lease.from_config(config)
        every, after = config["RECORD_EVERY"], lease.record_window
        tally, started = Tally(), time.monotonic()
        renewed = started
        route = routes.table().choose(None)[0]  # one route until the worker chooses per mail
        claims = throttle.admit(claims, route, utcnow())  # the others wait, not an attempt
        pending = deque(claims)
        finished: list[queue.Finished] = []
        oldest = 0.0  # when the first unwritten outcome came
        ready: dict[int, mime.Mail | queue.Finished] = {}  # made one claim ahead
        with sender.SmtpSession() as session:
            while pending:
                if self.stop.is_set():
                    # Closing the session drops a mail sent ahead: its content never went.
                    self._record(finished, retry, tally)
                    tally.released += _through_outage(queue.release, list(pending))
                    break
                if time.monotonic() - renewed > lease.renew_every:
                    # Never send on a claim another worker may already have taken.
                    self._record(finished, retry, tally)
                    held = _through_outage(queue.renew, list(pending), utcnow())
                    pending = deque(c for c in pending if c.id in held)
                    renewed = time.monotonic()
                    continue
                claim = pending.popleft()
                if not finished:
                    oldest = time.monotonic()
                mail = ready.pop(claim.id, None) or self._prepare(claim)
                ahead = None
                if pending and not pending[0].mail.attachment_count:
                    # Made now, its MAIL, RCPT and DATA go out with this mail's end (one
                    # round trip a mail). Not with attachments: one mail's are enough in memory.
                    ready[pending[0].id] = upcoming = self._prepare(pending[0])
                    ahead = upcoming if isinstance(upcoming, mime.Mail) else None
                done = self._send(session, claim, mail, ahead, lease.send_deadline, route)
                finished.append(done)
                del mail  # an attachment's data is not kept past its send
                if done.fault:
                    # The rest of the batch would meet the same fault: deferred with it.
                    tally.fault = done.error
                    finished += [_faulted(c, done) for c in pending]
                    pending.clear()
                if len(finished) >= every or time.monotonic() - oldest > after:
                    self._record(finished, retry, tally)
            self._record(finished, retry, tally)
        self.log.debug(
            "%s: batch of %d: %s, released %d in %.2fs",
            self.worker_id, len(claims), tally, tally.released, time.monotonic() - started,
        )  # fmt: skip
        return tally

    def _screen(self, claims: list[queue.Claim]) -> list[queue.Claim]:
        """The claims with recipients suppressed since they were queued marked; on an
        error the claims go back at once, not after the lease."""
        try:
            return screen.at_send(claims, utcnow())
        except Exception:
            db.session.rollback()
            _through_outage(queue.release, claims)
            raise

    def _prepare(self, claim: queue.Claim) -> mime.Mail | queue.Finished:
        """A claimed message made ready for SMTP, or its failure if it cannot be."""
        row = claim.mail  # the claim that outlives the send does not hold the mail
        try:
            attachments = []
            if row.attachment_count:
                attachments = queue.read_attachments(row.id, row.attachment_count)
                db.session.commit()
            mail = mime.prepare(row, attachments)
            if not mail.pending:  # every one left was suppressed since it was queued
                error = "every recipient still to be sent to is on the suppression list"
                return queue.Finished(claim, Outcome.FAILED, utcnow(), None, error)
            mail.returns = verp.return_paths(row.id, row.recipients)  # bounces (issue 15)
            return mail
        except (mime.BuildError, queue.Damaged) as exc:
            return queue.Finished(claim, Outcome.FAILED, utcnow(), None, str(exc))

    def _send(
        self,
        session: sender.SmtpSession,
        claim: queue.Claim,
        mail: mime.Mail | queue.Finished,
        ahead: mime.Mail | None,
        deadline: float,
        route: routes.Route,
    ) -> queue.Finished:
        """Send one prepared message, cut off after deadline; what came of it, not yet written.

        Its claim was renewed at most Lease.renew_every ago, and its outcome is written
        before the next renewal: while the claim holds (status.Lease).
        """
        if isinstance(mail, queue.Finished):
            return mail
        row = claim.mail
        entries, due_at = row.recipients, row.next_attempt_at
        claim = queue.Claim(claim.id, claim.worker_id, claim.attempts, claim.max_attempts, utcnow())
        self.delays.append((claim.started_at - due_at).total_seconds())  # metrics (issue 14)
        result = sender.deliver(session, mail, deadline, ahead)
        throttle.observe(row, result, route, utcnow())  # a 421 or 4.7.x slows the domain down
        # The attempt's end was the message's alone (a fault, a mail that cannot be built),
        # unless the recipients said something, or none was left to send to.
        if result.fault or (not result.recipients and deliveries.pending(entries)):
            error = result.error
            if result.outcome is not Outcome.SENT:
                error = error or ("failed" if result.outcome is Outcome.FAILED else "")
            return queue.Finished(claim, result.outcome, utcnow(), result.code, error,
                                  fault=result.fault, reply=result.reply)  # fmt: skip
        settled = deliveries.settle(
            entries, result.recipients, claim.attempts + 1, claim.max_attempts, result.error
        )
        return queue.Finished(claim, settled.outcome, utcnow(), settled.code, settled.error,
                              settled.recipients, reply=result.reply)  # fmt: skip

    def _record(self, finished: list[queue.Finished], retry: Retry, tally: Tally) -> None:
        """Write the outcomes waiting in finished, then empty it."""
        if not finished:
            return
        recorded = _through_outage(queue.record, finished, retry)
        for status in recorded.values():
            tally.sent += status is Status.SENT
            tally.deferred += status is Status.DEFERRED
            tally.failed += status is Status.FAILED
        metrics.count_recorded(finished, recorded, self.delays)  # metrics (issue 14)
        for done in finished:
            if done.claim.id not in recorded:
                tally.lost += 1
                self.log.warning("%s: lost the claim on message %d before recording %s",
                            self.worker_id, done.claim.id, done.outcome)  # fmt: skip
        finished.clear()


def _faulted(claim: queue.Claim, fault: queue.Finished) -> queue.Finished:
    """A claim not tried because the server or the settings failed the one before it."""
    claim = queue.Claim(claim.id, claim.worker_id, claim.attempts, claim.max_attempts, utcnow())
    return queue.Finished(claim, Outcome.DEFERRED, claim.started_at, fault.code, fault.error,
                          fault=True)  # fmt: skip
