"""Sending a claimed batch: each message through its routes in turn, outcomes recorded in groups."""

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flask import current_app

from outbox import queue
from outbox.capabilities import routes, throttle
from outbox.capabilities.bounces import verp
from outbox.capabilities.capture.transport import Session
from outbox.capabilities.dkim import keyring
from outbox.capabilities.routes import health
from outbox.core import deliveries
from outbox.core.status import Lease, Outcome, Retry, Status
from outbox.mail import mime
from outbox.mail.rendered import Sendable
from outbox.models import utcnow
from outbox.models.db import db
from outbox.models.drivers import UNREACHABLE
from outbox.ops import metrics
from outbox.worker.connections import Pools
from outbox.worker.tally import Tally

log = logging.getLogger("outbox.worker")


def plain_mail(row: Any) -> Sendable:
    """A claimed row written from its columns, with its attachments, as a signed mail (the
    builder of plain messages, queue.kinds)."""
    attachments = []
    if row.attachment_count:
        attachments = queue.read_attachments(row.id, row.attachment_count)
        db.session.commit()
    mail = mime.prepare(row, attachments)
    # a fault reading the DKIM keys is not the row's: outside BuildError
    mail.signers = keyring.signers_for(row.from_addr)
    return mail


def through_outage(write: Callable[..., Any], *args: Any) -> Any:
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
        except UNREACHABLE as exc:
            db.session.rollback()
            if time.monotonic() + delay > deadline:
                raise
            log.warning("database unavailable, retrying in %.1fs: %s", delay, exc.orig)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class BatchSender:
    """What a worker does with a batch it claimed; Worker supplies worker_id, stop and log."""

    worker_id: str
    stop: threading.Event
    log: logging.LoggerAdapter  # type: ignore[type-arg]
    pools: Pools | None = None  # the pass's connections; None: a pool for this batch alone
    lane: threading.local

    @property
    def delays(self) -> list[float]:
        """This thread's queue delays due to the metrics, not yet written."""
        found: list[float] | None = getattr(self.lane, "delays", None)
        if found is None:
            found = self.lane.delays = []
        return found

    def send_batch(self, claims: list[queue.Claim], claimed_at: float | None = None) -> Tally:
        """Send claimed messages, each through the routes its rule names, in turn.

        A route's transport trouble (connect, TLS, AUTH, 421, a timeout, a lost
        connection) sends the message, and those after it, through the next route of
        its rule; a recipient's refusal never does. claimed_at (time.monotonic()) is
        when the claims were made or last renewed.
        """
        table = routes.table()
        chains: dict[tuple[routes.Route, ...], list[queue.Claim]] = {}
        for claim in claims:
            chains.setdefault(table.choose(claim.mail), []).append(claim)
        tally, started = Tally(), time.monotonic()
        pools = self.pools or Pools()
        try:
            for chain, part in chains.items():
                # Each part's claims were last renewed at the claim, whatever the parts
                # before it renewed of their own.
                renewed = [claimed_at or started]
                for n, route in enumerate(chain):
                    admitted = throttle.admit(part, route, utcnow(), domains_taken=n > 0)
                    tally.held += len(part) - len(admitted)  # not an attempt
                    part = admitted
                    if not part:
                        break
                    with pools.session(route) as session:
                        part = self._send_on(session, part, tally, renewed, n == len(chain) - 1)
                    if not part:
                        break
                    self.log.warning("%s: %d messages go on from route %s to %s", self.worker_id,
                                     len(part), route.name, chain[n + 1].name)  # fmt: skip
        finally:
            if pools is not self.pools:
                pools.close()
        self.log.debug(
            "%s: batch of %d: %s, released %d in %.2fs",
            self.worker_id, len(claims), tally, tally.released, time.monotonic() - started,
        )  # fmt: skip
        return tally

    def _send_on(
        self,
        session: Session,
        claims: list[queue.Claim],
        tally: Tally,
        renewed: list[float],
        last: bool,
    ) -> list[queue.Claim]:
        """Send claims over one route's session; those left for the next route, if any.

        At most RECORD_EVERY outcomes wait unwritten, and none longer than
        RECORD_AFTER: a worker that dies sends at most that many messages again.
        Every outcome is written before the claims are renewed, so while its claim holds.
        """
        config = current_app.config
        retry, lease = Retry.from_config(config), Lease.from_config(config)
        every, after = config["RECORD_EVERY"], lease.record_window
        pending = deque(claims)
        finished: list[queue.Finished] = []
        oldest = 0.0  # when the first unwritten outcome came
        ready: dict[int, Sendable | queue.Finished] = {}  # made one claim ahead
        while pending:
            if self.stop.is_set():
                # Dropping the session drops a mail sent ahead: its content never went.
                session.drop()
                self._record(finished, retry, tally, session)
                tally.released += through_outage(queue.release, list(pending))
                return []
            if time.monotonic() - renewed[0] > lease.renew_every:
                # Never send on a claim another worker may already have taken.
                self._record(finished, retry, tally, session)
                held = through_outage(queue.renew, list(pending), utcnow())
                pending = deque(c for c in pending if c.id in held)
                renewed[0] = time.monotonic()
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
                ahead = None if isinstance(upcoming, queue.Finished) else upcoming
            done, moved = self._send(session, claim, mail, ahead, lease.send_deadline)
            del mail  # an attachment's data is not kept past its send
            if done.route is not None and not session.captures:  # how the route went (routes page)
                health.note(done.route, not moved, done.error if moved else None, utcnow())
            if moved and not last:
                # The server, not the message: this one and the rest try the next route.
                session.drop()
                self._record(finished, retry, tally, session)
                return [claim, *pending]
            finished.append(done)
            if done.fault:
                # The rest of the batch would meet the same fault: deferred with it.
                tally.fault = done.error
                finished += [_faulted(c, done) for c in pending]
                pending.clear()
            if len(finished) >= every or time.monotonic() - oldest > after:
                self._record(finished, retry, tally, session)
        self._record(finished, retry, tally, session)
        return []

    def _prepare(self, claim: queue.Claim) -> Sendable | queue.Finished:
        """A claimed message made ready for SMTP, or its failure if it cannot be."""
        row = claim.mail  # the claim that outlives the send does not hold the mail
        try:
            mail = queue.build(row)  # as its kind makes it (queue.kinds)
            if not mail.pending:  # every one left was suppressed since it was queued
                error = "every recipient still to be sent to is on the suppression list"
                return queue.Finished(claim, Outcome.FAILED, utcnow(), None, error)
            if row.envelope_from != "":  # the null sender's bounces go nowhere (RFC 5321 4.5.5)
                mail.returns = verp.return_paths(row.id, row.recipients)
            return mail
        except (mime.BuildError, queue.Damaged) as exc:
            return queue.Finished(claim, Outcome.FAILED, utcnow(), None, str(exc))

    def _send(
        self,
        session: Session,
        claim: queue.Claim,
        mail: Sendable | queue.Finished,
        ahead: Sendable | None,
        deadline: float,
    ) -> tuple[queue.Finished, bool]:
        """Send one prepared message, cut off after deadline: what came of it, not yet
        written, and whether the route's transport failed it before any recipient had it.

        Its claim was renewed at most Lease.renew_every ago, and its outcome is written
        before the next renewal: while the claim holds (status.Lease).
        """
        if isinstance(mail, queue.Finished):
            return mail, False
        row, route = claim.mail, session.route
        entries, due_at = row.recipients, row.next_attempt_at
        claim = queue.Claim(claim.id, claim.worker_id, claim.attempts, claim.max_attempts, utcnow(),
                            stream=claim.stream)  # fmt: skip
        self.delays.append((claim.started_at - due_at).total_seconds())
        result = session.send(claim.id, mail, deadline, ahead)
        throttle.observe(row, result, route, utcnow())  # a 421 or 4.7.x slows the domain down
        moved = _transport_trouble(result)
        # The attempt's end was the message's alone (a fault, a mail that cannot be built),
        # unless the recipients said something, or none was left to send to.
        if result.fault or (not result.recipients and deliveries.pending(entries)):
            error = result.error
            if result.outcome is not Outcome.SENT:
                error = error or ("failed" if result.outcome is Outcome.FAILED else "")
            return queue.Finished(claim, result.outcome, utcnow(), result.code, error,
                                  fault=result.fault, reply=result.reply, route=route.name,
                                  queued_at=row.created_at), moved  # fmt: skip
        settled = deliveries.settle(
            entries, result.recipients, claim.attempts + 1, claim.max_attempts, result.error
        )
        return queue.Finished(claim, settled.outcome, utcnow(), settled.code, settled.error,
                              settled.recipients, reply=result.reply, route=route.name,
                              queued_at=row.created_at), moved  # fmt: skip

    def _record(
        self, finished: list[queue.Finished], retry: Retry, tally: Tally, session: Session
    ) -> None:
        """Write the outcomes waiting in finished, then empty it.

        What the session keeps of them (capture's copies) is written first: an outcome
        on record always has its copy.
        """
        if not finished:
            return
        through_outage(session.settle)
        recorded = through_outage(queue.record, finished, retry)
        for status in recorded.values():
            tally.sent += status is Status.SENT
            tally.deferred += status is Status.DEFERRED
            tally.failed += status is Status.FAILED
        metrics.count_recorded(finished, recorded, self.delays)
        for done in finished:
            if done.claim.id not in recorded:
                tally.lost += 1
                self.log.warning("%s: lost the claim on message %d before recording %s",
                            self.worker_id, done.claim.id, done.outcome)  # fmt: skip
        finished.clear()


def _transport_trouble(result: Any) -> bool:
    """Whether the route failed the message before any recipient took it.

    A fault (connect, TLS, AUTH), a 421, or a timeout or lost connection (no reply
    code): another route may do better. A recipient's refusal, 4xx or 5xx, never moves it.
    """
    if any(reply.outcome is Outcome.SENT for reply in result.recipients.values()):
        return False
    if result.fault:
        return True
    return result.outcome is Outcome.DEFERRED and result.code in (421, None)


def _faulted(claim: queue.Claim, fault: queue.Finished) -> queue.Finished:
    """A claim not tried because the server or the settings failed the one before it."""
    claim = queue.Claim(claim.id, claim.worker_id, claim.attempts, claim.max_attempts, utcnow(),
                        stream=claim.stream)  # fmt: skip
    return queue.Finished(claim, Outcome.DEFERRED, claim.started_at, fault.code, fault.error,
                          fault=True, route=fault.route)  # fmt: skip
