"""Mails of several connections stored together (store.queue_many, as `outbox smtpd`'s
committer calls it): each gets what queue_raw would answer it alone, in one transaction
when none is in the way, and a mail refused or in the way costs the others nothing."""

import pytest
import sqlalchemy as sa

from outbox.capabilities import suppression
from outbox.capabilities.submission import Queued, Refused, queue_raw
from outbox.capabilities.submission.raw import read
from outbox.capabilities.submission.store import Submitted, queue_many
from outbox.models import Message
from outbox.models.db import db

pytestmark = pytest.mark.all_databases

SOURCE = "smtp:app"


def data(n: int, *, message_id: str | None = None, to: str = "") -> bytes:
    message_id = message_id or f"<together.{n}@app.example.com>"
    head = (f"From: Shop <shop@example.com>\r\nTo: {to or f'c{n}@example.com'}\r\n"
            f"Subject: Order {n}\r\nMessage-ID: {message_id}\r\n")  # fmt: skip
    return f"{head}Date: Tue, 24 Nov 2026 12:00:00 +0000\r\n\r\nOrder {n} shipped.\r\n".encode()


def mail(n: int, **kwargs: str) -> Submitted:
    return Submitted("shop@example.com", [kwargs.pop("to", "") or f"c{n}@example.com"],
                     data(n, **kwargs), SOURCE)  # fmt: skip


def stored() -> dict[int, tuple[str, str]]:
    rows = db.session.execute(sa.select(Message.id, Message.message_id, Message.subject))
    found = {pk: (message_id, subject) for pk, message_id, subject in rows}
    db.session.commit()
    return found


def test_mails_handed_over_at_once_are_stored_in_one_transaction_each_with_its_bytes(app):
    mails = [mail(n) for n in range(5)]
    commits: list[object] = []
    listener = lambda conn: commits.append(conn)  # noqa: E731
    sa.event.listen(db.engine, "commit", listener)
    try:
        answers = queue_many(mails)
    finally:
        sa.event.remove(db.engine, "commit", listener)
    assert len(commits) == 1
    assert all(isinstance(a, Queued) for a in answers)
    ids = [a.id for a in answers if isinstance(a, Queued)]
    assert len(set(ids)) == 5
    rows = stored()
    for n, answer in enumerate(answers):
        assert isinstance(answer, Queued)
        assert rows[answer.id] == (f"<together.{n}@app.example.com>", f"Order {n}")
        row = db.session.get_one(Message, answer.id)
        assert read(answer.id, row.raw_size or 0) == mails[n].data
        assert [e.address for e in row.recipients] == [f"c{n}@example.com"]


def test_a_refused_mail_among_them_leaves_the_others_stored(app):
    broken = Submitted("shop@example.com", ["c1@example.com"], b"no header here\r\n", SOURCE)
    answers = queue_many([mail(0), broken, mail(2)])
    assert isinstance(answers[0], Queued) and isinstance(answers[2], Queued)
    assert isinstance(answers[1], Refused) and answers[1].code == 554
    assert "header line 1 is not a field" in answers[1].reply()
    assert sorted(stored()) == sorted([answers[0].id, answers[2].id])


def test_a_retry_and_a_clash_in_the_group_get_the_answers_they_would_get_alone(app):
    earlier = queue_raw("shop@example.com", ["c0@example.com"], data(0), source=SOURCE)
    clash = Submitted("shop@example.com", ["c9@example.com"],
                      data(9, message_id="<together.3@app.example.com>"), SOURCE)  # fmt: skip
    answers = queue_many([mail(0), mail(3), clash, mail(4)])
    assert answers[0] == earlier  # a client that lost the 250 gets the earlier answer
    assert isinstance(answers[1], Queued) and isinstance(answers[3], Queued)
    assert isinstance(answers[2], Refused) and "was queued already for another mail" in str(
        answers[2]
    )
    assert sorted(stored()) == sorted([earlier.id, answers[1].id, answers[3].id])


def test_the_same_mail_twice_in_one_group_is_stored_once(app):
    answers = queue_many([mail(5), mail(5)])
    assert answers[0] == answers[1] and list(stored()) == [answers[0].id]  # type: ignore[union-attr]


def test_a_suppressed_recipient_refused_in_reject_mode_leaves_the_others_stored(app):
    suppression.add("c1@example.com", "hard bounce", "manual")
    db.session.commit()
    app.config["SUPPRESSED"] = "reject"
    answers = queue_many([mail(0), mail(1), mail(2)])
    assert isinstance(answers[1], Refused)
    assert answers[1].reply().startswith("550 5.7.1 on the suppression list: c1@example.com")
    assert sorted(stored()) == sorted(a.id for a in answers if isinstance(a, Queued))
    assert len(stored()) == 2


def test_suppressed_recipients_are_marked_in_a_group_as_alone(app):
    suppression.add("c1@example.com", "hard bounce", "manual")
    db.session.commit()
    answers = queue_many([mail(0), mail(1)])
    assert all(isinstance(a, Queued) for a in answers)
    marked = db.session.get_one(Message, answers[1].id)  # type: ignore[union-attr]
    assert marked.status == "failed"
    assert [e.state for e in marked.recipients] == ["suppressed"]
    assert db.session.get_one(Message, answers[0].id).status == "queued"  # type: ignore[union-attr]
