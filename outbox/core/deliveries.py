"""Each recipient's own delivery: what one attempt did for it, and what it has come to.

A message's recipients column holds one entry per recipient (addresses.stored). An entry
settled on its own carries "state" ("sent" or "failed") and the attempts it took; an entry
refused for now carries the last "code" and "reply" the server gave for it. An entry with
no "state" is still to be delivered: the next attempt sends to it, and to no one else.

When the message itself settles, entries without a state take its status: a message is
sent once every recipient is settled and one was accepted, failed if none was. A failed
message keeps no "failed" states, so that queuing it again (staff's resend) sends to all.
The common attempt, every recipient accepted at once, writes nothing to the column.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from outbox.core.status import Outcome, Status

Entry = dict[str, Any]


class State(StrEnum):
    """Where one recipient stands, as the pages and the API show it."""

    PENDING = "pending"  # not tried yet, or queued again
    DEFERRED = "deferred"  # refused for now; tried again on the retry schedule
    SENT = "sent"  # the server took the mail for it
    FAILED = "failed"  # refused for good, or given up on
    CANCELLED = "cancelled"  # the message was cancelled before it was delivered
    BOUNCED = "bounced"  # taken, then returned as undeliverable by a later server
    SUPPRESSED = "suppressed"  # on the suppression list at enqueue: never sent to


@dataclass(frozen=True)
class Reply:
    """What came of one recipient in one attempt."""

    outcome: Outcome  # SENT, DEFERRED or FAILED
    code: int | None
    text: str


ACCEPTED = Reply(Outcome.SENT, 250, "")  # the server took the mail for the recipient
PLAIN = frozenset({"kind", "address", "name"})  # the keys of an entry nothing was noted on


@dataclass(frozen=True)
class Settled:
    """What an attempt comes to for the message: its outcome and the column to write."""

    outcome: Outcome
    code: int | None
    error: str | None
    recipients: list[Entry] | None  # None: the column stays as it is


def pending(entries: list[Entry]) -> list[Entry]:
    """The entries an attempt sends to."""
    return [entry for entry in entries if "state" not in entry]


def settle(
    entries: list[Entry],
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
    if all(r is ACCEPTED for r in replies.values()) and all(e.keys() <= PLAIN for e in entries):
        if all(str(e["address"]) in replies for e in entries):
            return Settled(Outcome.SENT, ACCEPTED.code, None, None)  # the common attempt
    written = [dict(entry) for entry in entries]
    for entry in written:
        reply = replies.get(str(entry["address"]))
        if reply is None or "state" in entry:
            continue
        entry.pop("code", None), entry.pop("reply", None)
        if reply.outcome is Outcome.SENT:
            entry.update(state=State.SENT.value, attempts=attempts)
            continue
        if reply.code is not None:
            entry["code"] = reply.code
        entry["reply"] = reply.text
        if reply.outcome is Outcome.FAILED:
            entry.update(state=State.FAILED.value, attempts=attempts)
    waiting, gave_up = pending(written), ""
    if waiting and attempts >= max_attempts:
        gave_up = f" (gave up after {attempts} attempts)"
        for entry in waiting:
            given_up = f"{entry.get('reply') or 'not delivered'}{gave_up}"
            entry.update(state=State.FAILED.value, attempts=attempts, reply=given_up)
        waiting = []
    delivered = [e for e in written if e.get("state") == State.SENT.value]
    if waiting:
        outcome = Outcome.DEFERRED
    else:
        outcome = Outcome.SENT if delivered else Outcome.FAILED
    final = _compact(written, outcome, attempts)
    error = _summary(written, replies, said, gave_up)
    return Settled(outcome, _code(replies, outcome), error, None if final == entries else final)


def _compact(entries: list[Entry], outcome: Outcome, attempts: int) -> list[Entry]:
    """The entries as stored: no state where the message's own status says it.

    A failed message keeps no states but "suppressed", so that queuing it again sends to
    all but those on the suppression list (suppression.screen.restate looks again).
    """
    implied = {Outcome.SENT: State.SENT.value}.get(outcome)
    compact = []
    for entry in entries:
        entry = dict(entry)
        own = entry.get("state")
        if (outcome is Outcome.FAILED and own != State.SUPPRESSED.value) or (
            own == implied and entry.get("attempts") == attempts
        ):
            entry.pop("state", None)
        if "state" not in entry:
            entry.pop("attempts", None)  # it has been in every attempt
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
    entries: list[Entry], replies: Mapping[str, Reply], said: str | None, gave_up: str
) -> str | None:
    """The attempt in a line: how many recipients it reached, and why not the others."""
    first = {str(e["address"]): e for e in reversed(entries)}  # the first entry of each address
    delivered = {a for a, e in first.items() if e.get("state") == State.SENT.value}
    tried = [a for a in dict.fromkeys(str(e["address"]) for e in entries)
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


def _label(entry: Entry) -> State:
    return State.FAILED if entry.get("state") == State.FAILED.value else State.DEFERRED


def _said(entry: Entry) -> str:
    code, reply = entry.get("code"), str(entry.get("reply") or "")
    return f"{code} {reply}" if code else reply


def state(entry: Entry, status: Status | str) -> State:
    """Where the recipient of one entry stands, given its message's status."""
    own = entry.get("state")
    if own is not None:
        return State(str(own))
    status = Status(status)
    if status is Status.SENT:
        return State.SENT
    if status is Status.FAILED:
        return State.FAILED
    if status is Status.CANCELLED:
        return State.CANCELLED
    if status is Status.DEFERRED:
        return State.DEFERRED
    return State.PENDING


def partly_delivered(entries: list[Entry], status: Status | str) -> bool:
    """Whether some recipients have the mail while others do not (yet)."""
    states = {state(entry, status) for entry in entries}
    return State.SENT in states and len(states) > 1
