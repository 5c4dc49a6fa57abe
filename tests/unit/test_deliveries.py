"""deliveries.settle: what one attempt's replies make of a message and its recipients column."""

from dataclasses import dataclass

import pytest

from outbox.core.addresses import Kind
from outbox.core.deliveries import ACCEPTED, Reply, Settled, overall, pending, settle
from outbox.core.recipients import Recipient, State
from outbox.core.status import Outcome

A, B = "a@x.example", "b@x.example"
BUSY = Reply(Outcome.DEFERRED, 450, "busy")
UNKNOWN = Reply(Outcome.FAILED, 550, "no such user")
TAKEN = Reply(Outcome.SENT, 250, "2.0.0 queued as 4Xk2")  # acceptance in the server's words


def to(address: str, **noted: object) -> Recipient:
    return Recipient(Kind.TO, address, **noted)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    entries: list[Recipient]
    replies: dict[str, Reply]
    attempts: int
    settled: Settled
    max_attempts: int = 5
    said: str | None = None


# fmt: off
CASES = {
    "every recipient accepted at once: nothing to write": Case(
        [to(A), to(B)], {A: ACCEPTED, B: ACCEPTED}, 1, Settled(Outcome.SENT, 250, None, None)
    ),
    "an address in To and Bcc is accepted once for both": Case(
        [to(A), Recipient(Kind.BCC, A)], {A: ACCEPTED}, 1, Settled(Outcome.SENT, 250, None, None)
    ),
    "accepted in the server's words: the same column, written as it was": Case(
        [to(A)], {A: TAKEN}, 1, Settled(Outcome.SENT, 250, None, None)
    ),
    "accepted after a deferral: the refusal is forgotten": Case(
        [to(A, code=450, reply="busy")], {A: ACCEPTED}, 2,
        Settled(Outcome.SENT, 250, None, [to(A)]),
    ),
    "one accepted, one refused for good: sent, the refused one failed on its own": Case(
        [to(A), to(B)], {A: ACCEPTED, B: UNKNOWN}, 1,
        Settled(Outcome.SENT, 550,
                "delivered to 1 of 2 recipients; failed: b@x.example: 550 no such user",
                [to(A), to(B, code=550, reply="no such user", state=State.FAILED, attempts=1)]),
    ),
    "refused for now: deferred, the reply kept for the pages": Case(
        [to(A)], {A: BUSY}, 1,
        Settled(Outcome.DEFERRED, 450, "450 busy", [to(A, code=450, reply="busy")]),
    ),
    "refused for now again, alike: the column stays": Case(
        [to(A, code=450, reply="busy")], {A: BUSY}, 2,
        Settled(Outcome.DEFERRED, 450, "450 busy", None),
    ),
    "the attempt's own account when every recipient met the same end": Case(
        [to(A), to(B)], {A: BUSY, B: BUSY}, 1,
        Settled(Outcome.DEFERRED, 450, "connection lost",
                [to(A, code=450, reply="busy"), to(B, code=450, reply="busy")]),
        said="connection lost",
    ),
    "refused for now and for good, none delivered: deferred, each named": Case(
        [to(A), to(B)], {A: BUSY, B: UNKNOWN}, 1,
        Settled(Outcome.DEFERRED, 450,
                "delivered to 0 of 2 recipients; deferred: a@x.example: 450 busy; "
                "failed: b@x.example: 550 no such user",
                [to(A, code=450, reply="busy"),
                 to(B, code=550, reply="no such user", state=State.FAILED, attempts=1)]),
    ),
    "every recipient refused for good: failed, no states kept": Case(
        [to(A)], {A: UNKNOWN}, 1,
        Settled(Outcome.FAILED, 550, "550 no such user", [to(A, code=550, reply="no such user")]),
    ),
    "refused for now on the last attempt: given up": Case(
        [to(A)], {A: BUSY}, 3,
        Settled(Outcome.FAILED, 450, "450 busy (gave up after 3 attempts)",
                [to(A, code=450, reply="busy (gave up after 3 attempts)")]),
        max_attempts=3,
    ),
    "given up on the last attempt with the attempt's own account": Case(
        [to(A)], {A: BUSY}, 3,
        Settled(Outcome.FAILED, 450, "lost (gave up after 3 attempts)",
                [to(A, code=450, reply="busy (gave up after 3 attempts)")]),
        max_attempts=3, said="lost",
    ),
    "one accepted on the last attempt, one not tried: the other given up": Case(
        [to(A), to(B)], {A: ACCEPTED}, 2,
        Settled(Outcome.SENT, 250, None,
                [to(A), to(B, reply="not delivered (gave up after 2 attempts)",
                           state=State.FAILED, attempts=2)]),
        max_attempts=2,
    ),
    "sent in an earlier attempt: left as it was, the rest settled": Case(
        [to(A, state=State.SENT, attempts=1), to(B, code=450, reply="busy")], {B: ACCEPTED}, 2,
        Settled(Outcome.SENT, 250, None, [to(A, state=State.SENT, attempts=1), to(B)]),
    ),
    "a suppressed recipient is never tried and keeps its mark when the message fails": Case(
        [to(A, reply="hard bounce", state=State.SUPPRESSED, attempts=0), to(B)], {B: UNKNOWN}, 1,
        Settled(Outcome.FAILED, 550, "550 no such user",
                [to(A, reply="hard bounce", state=State.SUPPRESSED, attempts=0),
                 to(B, code=550, reply="no such user")]),
    ),
    "one deferred, one sent: deferred, the sent one on its own": Case(
        [to(A), to(B)], {A: ACCEPTED, B: BUSY}, 1,
        Settled(Outcome.DEFERRED, 450,
                "delivered to 1 of 2 recipients; deferred: b@x.example: 450 busy",
                [to(A, state=State.SENT, attempts=1), to(B, code=450, reply="busy")]),
    ),
}
# fmt: on


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_settle(case: Case) -> None:
    found = settle(case.entries, case.replies, case.attempts, case.max_attempts, case.said)
    assert found == case.settled


def test_only_entries_without_a_state_are_sent_to():
    entries = [to(A, state=State.SENT, attempts=1), to(B, code=450, reply="busy"),
               to(A, reply="on the list", state=State.SUPPRESSED, attempts=0)]  # fmt: skip
    assert pending(entries) == [entries[1]]


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ((Outcome.SENT, Outcome.FAILED, Outcome.DEFERRED), Outcome.SENT),
        ((Outcome.FAILED, Outcome.DEFERRED), Outcome.DEFERRED),
        ((Outcome.FAILED, Outcome.FAILED), Outcome.FAILED),
        ((), Outcome.FAILED),
    ],
)
def test_an_attempt_is_sent_if_anyone_took_it_else_deferred_if_anyone_may_later(outcomes, expected):
    replies = {f"r{n}@example.com": Reply(o, None, "") for n, o in enumerate(outcomes)}
    assert overall(replies) is expected
