"""Each recipient's own delivery: what one attempt did for it, and what it has come to.

A message's recipients column holds one Recipient per recipient (core.recipients). An
entry settled on its own carries a state (sent or failed) and the attempts it took; an
entry refused for now carries the last code and reply the server gave for it. An entry
with no state is still to be delivered: the next attempt sends to it, and to no one else.

When the message itself settles, entries without a state take its status: a message is
sent once every recipient is settled and one was accepted, failed if none was. A failed
message keeps no "failed" states, so that queuing it again (staff's resend) sends to all.
The common attempt, every recipient accepted at once, writes nothing to the column.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace

from outbox.core.recipients import Recipient, State, moved
from outbox.core.status import Outcome, Status


@dataclass(frozen=True)
class Reply:
    """What came of one recipient in one attempt."""

    outcome: Outcome  # SENT, DEFERRED or FAILED
    code: int | None
    text: str


ACCEPTED = Reply(Outcome.SENT, 250, "")  # the server took the mail for the recipient


@dataclass(frozen=True)
class Settled:
    """What an attempt comes to for the message: its outcome and the column to write."""

    outcome: Outcome
    code: int | None
    error: str | None
    recipients: list[Recipient] | None  # None: the column stays as it is


def overall(replies: Mapping[str, Reply]) -> Outcome:
    """An attempt's outcome from its recipients': sent if any was taken, else deferred if
    any may be tried again, else failed."""
    outcomes = {reply.outcome for reply in replies.values()}
    if Outcome.SENT in outcomes:
        return Outcome.SENT
    if Outcome.DEFERRED in outcomes:
        return Outcome.DEFERRED
    return Outcome.FAILED


def pending(entries: list[Recipient]) -> list[Recipient]:
    """The entries an attempt sends to."""
    return [entry for entry in entries if entry.state is None]


def settle(
    entries: list[Recipient],
    replies: Mapping[str, Reply],
    attempts: int,
    max_attempts: int,
    said: str | None = None,
) -> Settled:
    """Apply one attempt's replies (by stored address) to the entries of its message.

    attempts counts this one; recipients still refused for now after the last attempt
    allowed are given up on. said: the attempt's own account, used when every recipient
    it tried met the same end (a refused DATA, a lost connection).
    """
    if all(r is ACCEPTED for r in replies.values()) and all(e.plain for e in entries):
        if all(e.address in replies for e in entries):
            return Settled(Outcome.SENT, ACCEPTED.code, None, None)  # the common attempt
    written = [_replied(entry, replies.get(entry.address), attempts) for entry in entries]
    waiting, gave_up = pending(written), ""
    if waiting and attempts >= max_attempts:
        gave_up = f" (gave up after {attempts} attempts)"
        written = [
            moved(e, SENDING, State.FAILED, attempts=attempts,
                  reply=f"{e.reply or 'not delivered'}{gave_up}") if e.state is None else e
            for e in written
        ]  # fmt: skip
        waiting = []
    delivered = [e for e in written if e.state is State.SENT]
    if waiting:
        outcome = Outcome.DEFERRED
    else:
        outcome = Outcome.SENT if delivered else Outcome.FAILED
    final = _compact(written, outcome, attempts)
    error = _summary(written, replies, said, gave_up)
    return Settled(outcome, _code(replies, outcome), error, None if final == entries else final)


SENDING = Status.SENDING  # the status of every message an attempt is made for


def _replied(entry: Recipient, reply: Reply | None, attempts: int) -> Recipient:
    """The entry after one attempt's reply for its address (None: not tried)."""
    if reply is None or entry.state is not None:
        return entry
    if reply.outcome is Outcome.SENT:
        return moved(entry, SENDING, State.SENT, code=None, reply=None, attempts=attempts)
    if reply.outcome is Outcome.FAILED:
        return moved(entry, SENDING, State.FAILED, code=reply.code, reply=reply.text,
                     attempts=attempts)  # fmt: skip
    return moved(entry, SENDING, State.DEFERRED, code=reply.code, reply=reply.text)


def _compact(entries: list[Recipient], outcome: Outcome, attempts: int) -> list[Recipient]:
    """The entries as stored: no state where the message's own status says it.

    A failed message keeps no states but "suppressed", so that queuing it again sends to
    all but those on the suppression list (suppression.screen.restate looks again).
    """
    implied = State.SENT if outcome is Outcome.SENT else None
    compact = []
    for entry in entries:
        own = entry.state
        if (outcome is Outcome.FAILED and own is not State.SUPPRESSED) or (
            own is implied and entry.attempts == attempts
        ):
            own = None
        if own is None and (entry.state is not None or entry.attempts is not None):
            entry = replace(entry, state=None, attempts=None)  # it has been in every attempt
        compact.append(entry)
    return compact


def _code(replies: Mapping[str, Reply], outcome: Outcome) -> int | None:
    """The SMTP code that stands for the attempt: the lowest refusal for now, else the highest;
    the server's acceptance when none refused a mail it took."""
    codes = [r.code for r in replies.values() if r.code and r.outcome is not Outcome.SENT]
    if not codes:
        return ACCEPTED.code if outcome is Outcome.SENT else None
    if outcome is Outcome.DEFERRED:
        return min((c for c in codes if c < 500), default=min(codes))
    return max(codes)


def _summary(
    entries: list[Recipient], replies: Mapping[str, Reply], said: str | None, gave_up: str
) -> str | None:
    """The attempt in a line: how many recipients it reached, and why not the others."""
    first = {e.address: e for e in reversed(entries)}  # the first entry of each address
    delivered = {a for a, e in first.items() if e.state is State.SENT}
    tried = [a for a in dict.fromkeys(e.address for e in entries)
             if a in replies and a not in delivered]  # fmt: skip
    if not tried:
        return None
    ends = {_said(first[a]) for a in tried}
    if not delivered and len(ends) == 1:
        return f"{said}{gave_up}" if said else ends.pop()
    parts = [f"delivered to {len(delivered)} of {len(first)} recipients"]
    for label in (State.DEFERRED, State.FAILED):
        found = [f"{a}: {_said(first[a])}" for a in tried if _label(first[a]) is label]
        if found:
            parts.append(f"{label}: " + "; ".join(found))
    return "; ".join(parts)


def _label(entry: Recipient) -> State:
    return State.FAILED if entry.state is State.FAILED else State.DEFERRED


def _said(entry: Recipient) -> str:
    code, reply = entry.code, entry.reply or ""
    return f"{code} {reply}" if code else reply
