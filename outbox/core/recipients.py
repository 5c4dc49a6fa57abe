"""A message's recipients: the Recipient entry, its states and moves, and the one codec of
the recipients column.

The column holds one JSON object per recipient, To, Cc and Bcc in the order given. An
entry settled on its own carries a "state" and the attempts it took; one refused for now
carries the server's last "code" and "reply"; one with no "state" is still to be
delivered (outbox.core.deliveries). Every reader and writer goes through decode and
encode (the models' column type calls them), so the entry is typed everywhere else.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from outbox.core.addresses import Kind, Mailbox
from outbox.core.status import Status


class State(StrEnum):
    """Where one recipient stands, as the pages and the API show it."""

    PENDING = "pending"  # not tried yet, or queued again
    DEFERRED = "deferred"  # refused for now; tried again on the retry schedule
    SENT = "sent"  # the server took the mail for it
    FAILED = "failed"  # refused for good, or given up on
    CANCELLED = "cancelled"  # the message was cancelled before it was delivered
    BOUNCED = "bounced"  # taken, then returned as undeliverable by a later server
    SUPPRESSED = "suppressed"  # on the suppression list: never sent to
    COMPLAINED = "complained"  # taken, then reported as spam by its mailbox (an ARF report)


# Every move a recipient's entry makes; moved() checks each one against this table. A
# recipient without a state of its own stands where its message's status says (state());
# moves of the message alone (a deferral, a cancel, a resend) move it with them.
MOVES: dict[State, frozenset[State]] = {
    State.PENDING: frozenset(
        {State.DEFERRED, State.SENT, State.FAILED, State.SUPPRESSED, State.CANCELLED}
    ),
    State.DEFERRED: frozenset(
        {State.PENDING, State.SENT, State.FAILED, State.SUPPRESSED, State.CANCELLED}
    ),
    State.SENT: frozenset({State.BOUNCED, State.COMPLAINED}),
    State.FAILED: frozenset({State.PENDING, State.SUPPRESSED}),
    State.CANCELLED: frozenset({State.PENDING, State.SUPPRESSED}),
    State.SUPPRESSED: frozenset({State.PENDING}),
    State.BOUNCED: frozenset(),
    State.COMPLAINED: frozenset(),
}
# A complaint marks only a sent recipient: a bounced one never had the mail in a mailbox
# (and its address is suppressed already), a complained one was told of once.
# The states an entry stores as its own; the others it takes from its message's status.
OWN = frozenset({State.SENT, State.FAILED, State.SUPPRESSED, State.BOUNCED, State.COMPLAINED})


class MoveRefused(ValueError):
    """A recipient is not in a state from which that move is allowed."""


@dataclass(frozen=True, slots=True)
class Recipient:
    """One entry of the recipients column; None: the key is not stored."""

    kind: Kind
    address: str  # the addr-spec as checked at enqueue
    name: str | None = None  # the display name; a mailing's rows store "" for none
    code: int | None = None  # the server's last reply code for it, if it refused it
    reply: str | None = None  # that reply's text, or why it is not sent to
    state: State | None = None  # its own state (OWN); None: its message's status says
    attempts: int | None = None  # the attempts it took, beside its own state
    dsn: str | None = None  # a bounce's status code (RFC 3464), for a bounced one

    @property
    def mailbox(self) -> Mailbox:
        return Mailbox(self.address, self.name or "")

    @property
    def plain(self) -> bool:
        """Whether nothing was noted on it: no state, reply, attempts or bounce."""
        return (
            self.state is None and self.code is None and self.reply is None
            and self.attempts is None and self.dsn is None
        )  # fmt: skip


def state(entry: Recipient, status: Status | str) -> State:
    """Where the recipient of one entry stands, given its message's status."""
    if entry.state is not None:
        return entry.state
    return _BY_STATUS[Status(status)]


_BY_STATUS = {
    Status.QUEUED: State.PENDING,
    Status.SENDING: State.PENDING,
    Status.DEFERRED: State.DEFERRED,
    Status.SENT: State.SENT,
    Status.FAILED: State.FAILED,
    Status.CANCELLED: State.CANCELLED,
}


def can_move(old: State, new: State) -> bool:
    """Whether a recipient may go from old to new."""
    return new in MOVES[old]


def moved(entry: Recipient, status: Status | str, new: State, **noted: Any) -> Recipient:
    """The entry moved to new, with what is noted on it (code, reply, attempts, dsn).

    Every state written to the column is written by an entry made here: the move from
    where it stands under its message's status is checked against MOVES (MoveRefused),
    and an own state is stored only for the states in OWN. The column itself is written
    by the message's guarded UPDATE (outbox.queue.moves), which holds its status.
    """
    old = state(entry, status)
    if not can_move(old, new):
        raise MoveRefused(f"a recipient does not move from {old} to {new}")
    if "state" in noted:
        raise ValueError("the state is given as new, not as a value")
    return replace(entry, state=new if new in OWN else None, **noted)


def partly_delivered(entries: list[Recipient], status: Status | str) -> bool:
    """Whether some recipients have the mail while others do not (yet)."""
    states = {state(entry, status) for entry in entries}
    return State.SENT in states and len(states) > 1


def stored(to: list[Mailbox], cc: list[Mailbox], bcc: list[Mailbox]) -> list[Recipient]:
    """The recipients of a new message: To, Cc and Bcc in the order given."""
    return [
        Recipient(kind, m.address, m.name or None)
        for kind, listed in ((Kind.TO, to), (Kind.CC, cc), (Kind.BCC, bcc))
        for m in listed
    ]


def by_kind(entries: Iterable[Recipient]) -> dict[Kind, list[Mailbox]]:
    """The mailboxes of To, Cc and Bcc, each in order."""
    found: dict[Kind, list[Mailbox]] = {kind: [] for kind in Kind}
    for entry in entries:
        found[entry.kind].append(entry.mailbox)
    return found


# --- the codec: the recipients column's JSON and back ---
# Keys in the order each writer has always stored them (the column is searched as text,
# and a stored row must read back and write back the same): most states note the code
# and reply first; a suppressed entry is marked after them, a bounced one noted last.
ORDER = ("kind", "address", "name", "code", "reply", "state", "attempts", "dsn")
ORDERS = {
    State.SUPPRESSED: ("kind", "address", "name", "code", "state", "reply", "attempts", "dsn"),
    State.BOUNCED: ("kind", "address", "name", "state", "dsn", "reply", "attempts", "code"),
}
KEYS = frozenset(ORDER)
_KINDS = {kind.value: kind for kind in Kind}
_STATES = {found.value: found for found in State}


def decode(column: Iterable[Mapping[str, Any]]) -> list[Recipient]:
    """The entries of a stored recipients column (its JSON as read); ValueError if one
    holds a key, kind or state outbox does not write."""
    return [_decoded(entry) for entry in column]


def _decoded(entry: Mapping[str, Any]) -> Recipient:
    if not entry.keys() <= KEYS:
        raise ValueError(f"a recipients entry holds keys outbox does not write: {dict(entry)}")
    try:
        kind = _KINDS[entry["kind"]]
        own = entry.get("state")
        found = None if own is None else _STATES[own]
    except KeyError as exc:
        raise ValueError(f"not a recipients entry: {dict(entry)}") from exc
    return Recipient(
        kind, entry["address"], entry.get("name"), entry.get("code"), entry.get("reply"),
        found, entry.get("attempts"), entry.get("dsn"),
    )  # fmt: skip


def encode(entries: Iterable[Recipient]) -> list[dict[str, Any]]:
    """The recipients column for these entries, as the JSON stores it."""
    return [_encoded(entry) for entry in entries]


def _encoded(entry: Recipient) -> dict[str, Any]:
    if entry.plain:  # the common entry, fast
        if entry.name is None:
            return {"kind": entry.kind.value, "address": entry.address}
        return {"kind": entry.kind.value, "address": entry.address, "name": entry.name}
    values = {
        "kind": entry.kind.value, "address": entry.address, "name": entry.name,
        "code": entry.code, "reply": entry.reply,
        "state": None if entry.state is None else entry.state.value,
        "attempts": entry.attempts, "dsn": entry.dsn,
    }  # fmt: skip
    order = ORDERS.get(entry.state, ORDER) if entry.state is not None else ORDER
    return {key: values[key] for key in order if values[key] is not None}
