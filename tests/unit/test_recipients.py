"""The recipients column's entry, its codec and its state machine, without a database."""

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.core.addresses import Kind, Mailbox
from outbox.core.recipients import (
    MOVES,
    OWN,
    MoveRefused,
    Recipient,
    State,
    by_kind,
    can_move,
    decode,
    encode,
    moved,
    partly_delivered,
    state,
    stored,
)
from outbox.core.status import Status
from outbox.models.drivers import _json


def test_a_new_message_stores_its_recipients_in_the_order_given():
    to, cc = [Mailbox("b@x.example"), Mailbox("a@x.example", "A")], [Mailbox("c@x.example")]
    entries = stored(to, cc, [Mailbox("d@x.example")])
    assert encode(entries) == [
        {"kind": "to", "address": "b@x.example"},
        {"kind": "to", "address": "a@x.example", "name": "A"},
        {"kind": "cc", "address": "c@x.example"},
        {"kind": "bcc", "address": "d@x.example"},
    ]
    assert [e.mailbox for e in entries] == [*to, *cc, Mailbox("d@x.example")]
    assert by_kind(entries) == {Kind.TO: to, Kind.CC: cc, Kind.BCC: [Mailbox("d@x.example")]}


# The column's text as the writers store it (drivers._json), one entry of each shape.
STORED = {
    "plain": '[{"kind": "to", "address": "a@x.example"}]',
    "named": '[{"kind": "cc", "address": "jörg@x.example", "name": "Jörg"}]',
    "a mailing's, no name": '[{"kind": "to", "address": "a@x.example", "name": ""}]',
    "deferred": '[{"kind": "to", "address": "a@x.example", "code": 450, "reply": "busy"}]',
    "deferred, no code": '[{"kind": "to", "address": "a@x.example", "reply": "timed out"}]',
    "sent on its own": '[{"kind": "to", "address": "a@x.example", "state": "sent", "attempts": 2}]',
    "failed": '[{"kind": "bcc", "address": "a@x.example", "name": "A", "code": 550, '
    '"reply": "no such user", "state": "failed", "attempts": 1}]',
    "suppressed": '[{"kind": "to", "address": "a@x.example", "state": "suppressed", '
    '"reply": "hard bounce", "attempts": 0}]',
    "bounced": '[{"kind": "to", "address": "a@x.example", "state": "bounced", "dsn": "5.1.1", '
    '"reply": "user unknown", "attempts": 1, "code": 550}]',
    "complained": '[{"kind": "to", "address": "a@x.example", "reply": "abuse report from '
    'Yahoo", "state": "complained", "attempts": 1}]',
    "two": '[{"kind": "to", "address": "a@x.example"}, {"kind": "cc", "address": "b@x.example", '
    '"code": 421, "reply": "try later"}]',
}


@pytest.mark.parametrize("text", STORED.values(), ids=STORED.keys())
def test_a_stored_column_reads_back_and_writes_back_byte_for_byte(text):
    entries = decode(json.loads(text))
    assert all(isinstance(e, Recipient) for e in entries)
    assert _json(encode(entries)) == text


def test_the_entries_read_are_typed():
    (failed,) = decode(json.loads(STORED["failed"]))
    assert failed == Recipient(Kind.BCC, "a@x.example", "A", 550, "no such user", State.FAILED, 1)
    assert failed.kind is Kind.BCC and failed.state is State.FAILED
    (mailing,) = decode(json.loads(STORED["a mailing's, no name"]))
    assert (mailing.name, mailing.mailbox) == ("", Mailbox("a@x.example"))


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "to", "address": "a@x.example", "extra": 1},
        {"kind": "from", "address": "a@x.example"},
        {"kind": "to", "address": "a@x.example", "state": "lost"},
        {"address": "a@x.example"},
    ],
)
def test_an_entry_outbox_does_not_write_is_refused(entry):
    with pytest.raises(ValueError):
        decode([entry])


TEXT = st.text(max_size=20)
NUMBER = st.integers(min_value=0, max_value=10**6)
RECIPIENTS = st.builds(
    Recipient,
    kind=st.sampled_from(Kind),
    address=TEXT,
    name=st.none() | TEXT,
    code=st.none() | NUMBER,
    reply=st.none() | TEXT,
    state=st.none() | st.sampled_from(State),
    attempts=st.none() | NUMBER,
    dsn=st.none() | TEXT,
)


@given(st.lists(RECIPIENTS, max_size=5))
def test_every_entry_goes_through_the_column_and_back(entries):
    text = _json(encode(entries))
    assert decode(json.loads(text)) == entries
    assert _json(encode(decode(json.loads(text)))) == text  # stored once, stored alike


@given(RECIPIENTS)
def test_a_plain_entry_is_one_nothing_was_noted_on(entry):
    noted = (entry.code, entry.reply, entry.state, entry.attempts, entry.dsn)
    assert entry.plain == all(value is None for value in noted)
    assert set(encode([entry])[0]) <= {"kind", "address", "name"} or not entry.plain


# --- the recipient's state machine ---
ALLOWED = {
    (State.PENDING, State.DEFERRED), (State.PENDING, State.SENT), (State.PENDING, State.FAILED),
    (State.PENDING, State.SUPPRESSED), (State.PENDING, State.CANCELLED),
    (State.DEFERRED, State.PENDING), (State.DEFERRED, State.SENT),
    (State.DEFERRED, State.FAILED), (State.DEFERRED, State.SUPPRESSED),
    (State.DEFERRED, State.CANCELLED),
    (State.SENT, State.BOUNCED), (State.SENT, State.COMPLAINED),
    (State.FAILED, State.PENDING), (State.FAILED, State.SUPPRESSED),
    (State.CANCELLED, State.PENDING), (State.CANCELLED, State.SUPPRESSED),
    (State.SUPPRESSED, State.PENDING),
}  # fmt: skip
# A recipient standing in each state: an own state, or its message's status.
STANDING = {
    State.PENDING: (Recipient(Kind.TO, "a@x.example"), Status.SENDING),
    State.DEFERRED: (Recipient(Kind.TO, "a@x.example", code=450, reply="busy"), Status.DEFERRED),
    State.CANCELLED: (Recipient(Kind.TO, "a@x.example"), Status.CANCELLED),
    State.SENT: (Recipient(Kind.TO, "a@x.example", state=State.SENT, attempts=1), Status.DEFERRED),
    State.FAILED: (Recipient(Kind.TO, "a@x.example"), Status.FAILED),
    State.SUPPRESSED: (
        Recipient(Kind.TO, "a@x.example", reply="on the list", state=State.SUPPRESSED, attempts=0),
        Status.QUEUED,
    ),
    State.BOUNCED: (
        Recipient(Kind.TO, "a@x.example", state=State.BOUNCED, attempts=1, dsn="5.1.1"),
        Status.SENT,
    ),
    State.COMPLAINED: (
        Recipient(Kind.TO, "a@x.example", reply="abuse", state=State.COMPLAINED, attempts=1),
        Status.SENT,
    ),
}


def test_the_table_holds_every_state_and_no_other_move():
    assert set(MOVES) == set(State)
    assert {(old, new) for old, news in MOVES.items() for new in news} == ALLOWED


@pytest.mark.parametrize("old, new", list(itertools.product(State, State)), ids=str)
def test_each_move_is_made_or_refused_as_the_table_says(old, new):
    entry, status = STANDING[old]
    assert state(entry, status) is old
    assert can_move(old, new) == ((old, new) in ALLOWED)
    if (old, new) not in ALLOWED:
        with pytest.raises(MoveRefused, match=f"from {old} to {new}"):
            moved(entry, status, new)
        return
    after = moved(entry, status, new, reply="noted")
    assert after.state == (new if new in OWN else None)
    assert (after.address, after.reply) == (entry.address, "noted")


def test_a_move_takes_no_state_as_a_value():
    entry, status = STANDING[State.PENDING]
    with pytest.raises(ValueError, match="given as new"):
        moved(entry, status, State.SENT, state=State.FAILED)


def test_a_recipient_without_a_state_stands_where_its_message_does():
    plain = Recipient(Kind.TO, "a@x.example")
    expected = {
        Status.QUEUED: State.PENDING, Status.SENDING: State.PENDING,
        Status.DEFERRED: State.DEFERRED, Status.SENT: State.SENT,
        Status.FAILED: State.FAILED, Status.CANCELLED: State.CANCELLED,
    }  # fmt: skip
    assert {status: state(plain, status.value) for status in Status} == expected


def test_partly_delivered_is_some_sent_and_some_not():
    sent = Recipient(Kind.TO, "a@x.example", state=State.SENT, attempts=1)
    plain = Recipient(Kind.TO, "b@x.example")
    assert partly_delivered([sent, plain], Status.DEFERRED)
    assert not partly_delivered([sent, plain], Status.SENT)
    assert not partly_delivered([plain], Status.DEFERRED)
