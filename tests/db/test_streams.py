"""Streams in the queue: claims take transactional mail first, a lane is kept for it while
broadcast mail fills the others, and an unsubscribe keeps only broadcast mail away."""

import threading

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY

from outbox import queue
from outbox.capabilities import suppression
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.app import draft
from tests.support.rows import delivered, fresh, states

A, B = "a@example.com", "b@example.com"
BROADCAST = Stream.BROADCAST


def listed(address: str, source: str) -> None:
    suppression.add(address, "asked", source)
    db.session.commit()


@pytest.mark.all_databases
def test_a_claim_takes_transactional_mail_before_older_broadcast_mail_of_any_priority(
    make_message,
):
    news = [make_message(stream=BROADCAST, priority=9).id for _ in range(3)]
    resets = [make_message(priority=-1).id for _ in range(2)]
    claimed = [c.id for c in queue.claim_batch("w1", 3)]
    assert claimed == [*resets, news[0]]
    assert [c.id for c in queue.claim_batch("w2", 10)] == news[1:]


@pytest.mark.all_databases
def test_a_cap_limits_a_streams_share_of_a_claim(make_message):
    news = [make_message(stream=BROADCAST).id for _ in range(3)]
    resets = [make_message().id for _ in range(3)]
    caps = {BROADCAST: 1}
    assert [c.id for c in queue.claim_batch("w1", 10, caps=caps)] == [*resets, news[0]]
    assert [c.id for c in queue.claim_batch("w1", 10, caps=caps)] == [news[1]]
    assert queue.has_due(stream=BROADCAST) and not queue.has_due(stream=Stream.TRANSACTIONAL)


@pytest.mark.all_databases
def test_a_transactional_mail_goes_out_while_a_broadcast_backlog_drains(smtp_app, smtp):
    smtp_app.config.update(MAIL_MAX_CONNECTIONS=2, BATCH_SIZE=40)  # lanes claim 20 each
    smtp.recorder.data_wait = 0.1  # a slow server: the backlog takes seconds
    backlog = 40
    for n in range(backlog):
        queue.enqueue(draft(from_addr="news@example.com", to=[f"r{n}@example.com"], text="news",
                            stream=BROADCAST), source="test", max_attempts=3)  # fmt: skip
    arrived, posted = threading.Event(), threading.Event()
    reset: list[str] = []
    sending: list[int] = []

    def count() -> None:
        sending.append(1)
        if len(sending) >= 2:  # each lane has claimed broadcast mail by now
            arrived.set()

    def post_a_reset() -> None:
        arrived.wait()
        with smtp_app.app_context():
            try:
                reset_draft = draft(from_addr="shop@example.com", to=[A], text="reset")
                message, _ = queue.enqueue(reset_draft, source="test", max_attempts=3)
                reset.append(message.message_id)
            finally:
                db.session.remove()
                posted.set()

    smtp.recorder.on_data = count
    poster = threading.Thread(target=post_a_reset, daemon=True)
    poster.start()
    tally = Worker().drain()
    poster.join()
    assert posted.is_set() and reset
    assert tally.sent == backlog + 1
    order = smtp.recorder.message_ids()
    after = order[order.index(reset[0]) + 1 :]
    # Without the kept lane every broadcast mail was claimed before the reset came in,
    # and the reset went last.
    assert len(after) >= 1, order


@pytest.mark.all_databases
def test_an_unsubscribe_keeps_broadcast_mail_only_and_a_bounce_keeps_both(
    smtp_app, smtp, make_message
):
    listed(A, "unsubscribe")
    listed(B, "bounce")
    reset = make_message(to=[A, B])
    news = make_message(to=[A, B], stream=BROADCAST)
    assert {a: s for a, (s, _, _) in states(fresh(reset.id)).items()} == {
        A: "pending", B: "suppressed"}  # fmt: skip
    assert fresh(news.id).status == Status.FAILED  # no one left to send to
    assert {a: s for a, (s, _, _) in states(fresh(news.id)).items()} == {
        A: "suppressed", B: "suppressed"}  # fmt: skip
    assert Worker().drain().sent == 1
    assert delivered(smtp) == {A: 1}


@pytest.mark.all_databases
def test_an_unsubscribe_after_enqueue_is_matched_at_send_for_broadcast_mail_only(
    smtp_app, smtp, make_message
):
    reset = make_message(to=[A]).id
    news = make_message(to=[A, B], stream=BROADCAST).id
    listed(A, "unsubscribe")
    assert Worker().drain().sent == 2
    assert delivered(smtp) == {A: 1, B: 1}  # the reset to A, the news to B
    assert states(fresh(reset))[A][0] == "sent"
    assert states(fresh(news))[A][0] == "suppressed"


@pytest.mark.all_databases
def test_reject_mode_refuses_broadcast_mail_to_an_unsubscribed_address_only(app, make_message):
    app.config["SUPPRESSED"] = "reject"
    listed(A, "unsubscribe")
    assert make_message(to=[A]).id
    with pytest.raises(Exception, match="suppression list"):
        make_message(to=[A], stream=BROADCAST)
    count = db.session.scalar(sa.select(sa.func.count()).select_from(Message))
    db.session.commit()
    assert count == 1


def test_attempts_are_counted_by_stream(smtp_app, smtp, make_message):
    def sent(stream: str) -> float:
        labels = {"stream": stream, "outcome": "sent"}
        return REGISTRY.get_sample_value("outbox_stream_attempts_total", labels) or 0.0

    before = {stream: sent(stream) for stream in ("transactional", "broadcast")}
    make_message()
    make_message(stream=BROADCAST)
    make_message(stream=BROADCAST)
    assert Worker().drain().sent == 3
    assert sent("transactional") - before["transactional"] == 1
    assert sent("broadcast") - before["broadcast"] == 2
