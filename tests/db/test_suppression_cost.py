"""What the suppression list costs: one query for a batch, none while it is empty; for the
worker one read a claimed batch, and nothing when recording unless a recipient was
refused as unknown."""

import pytest
import sqlalchemy as sa

from outbox import queue
from outbox.capabilities import suppression
from outbox.models import Suppression
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.app import draft
from tests.support.rows import fresh, states
from tests.support.statements import statements

A, B, C = "a@example.com", "b@example.com", "c@example.com"


@pytest.mark.all_databases
def test_a_batch_asks_the_list_once_and_an_empty_list_is_not_asked(app, monkeypatch):
    # Within the window the list is known empty however slow the machine; test_suppression
    # moves past the window's end itself.
    monkeypatch.setattr(suppression, "EMPTY_SECONDS", 3600.0)
    drafts = [draft(from_addr="s@example.com", to=[f"r{n}@example.com", B], text="x")
              for n in range(1000)]  # fmt: skip
    queue.enqueue_batch(drafts[:1], source="test", max_attempts=3)  # the list is looked at
    with statements() as seen:
        queue.enqueue_batch(drafts, source="test", max_attempts=3)
    assert [s for s in seen if "suppressions" in s] == []  # known empty: nothing asked
    suppression.add(B, "asked", "manual")
    db.session.commit()
    with statements() as seen:
        queued, _ = queue.enqueue_batch(drafts, source="test", max_attempts=3)
    assert len([s for s in seen if "suppressions" in s]) == 1
    assert states(fresh(queued[-1].id))[B][0] == "suppressed"


@pytest.mark.all_databases
def test_recording_without_such_a_refusal_asks_nothing_more(smtp_app, smtp, make_message):
    suppression.add(C, "asked", "manual")
    db.session.commit()
    smtp.recorder.rcpt_replies[B] = "550 5.7.1 policy"
    for n in range(20):
        make_message(to=[A, B] if n % 2 else [A])
    smtp_app.config["BATCH_SIZE"] = 8
    with statements() as seen:
        Worker().drain()
    asked = [s for s in seen if "suppressions" in s]
    assert len(asked) == 3  # one read for each batch claimed (8, 8, 4), none to record
    assert all(s.lstrip().upper().startswith("SELECT") for s in asked), asked
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Suppression)) == 1
