"""The queue's hook points and its registry of kinds, without a database: who runs, in
what order, with what, and what a row's kind is."""

from datetime import datetime
from types import SimpleNamespace

import pytest
from flask import Flask

from outbox.core.kinds import MessageKind, kind_of
from outbox.core.status import Status
from outbox.queue import hooks, kinds

NOW = datetime(2026, 1, 1, 12, 0, 0)


@pytest.fixture
def bare():
    """A Flask app of no outbox at all: the hooks live in its extensions."""
    app = Flask("hooks")
    with app.app_context():
        yield app


def row(raw_size=None, mailing_id=None):
    return SimpleNamespace(raw_size=raw_size, mailing_id=mailing_id)


@pytest.mark.parametrize(
    ("raw_size", "mailing_id", "kind"),
    [
        (None, None, MessageKind.PLAIN),
        (None, 0, MessageKind.PLAIN),
        (None, 7, MessageKind.MAILING),
        (0, None, MessageKind.RAW),  # an empty raw mail is raw still
        (120, None, MessageKind.RAW),
        (120, 7, MessageKind.RAW),  # the stored bytes are what goes
    ],
)
def test_a_rows_kind_comes_from_its_columns(raw_size, mailing_id, kind):
    assert kind_of(row(raw_size, mailing_id)) is kind


def test_each_kind_is_built_and_sent_again_by_what_registered_it(bare):
    for kind in MessageKind:
        kinds.on_kind(bare, kind, build=lambda r, k=kind: f"mail of {k}",
                      send_again=lambda old, source, most, k=kind: (k, source, most))  # fmt: skip
    assert kinds.build(row()) == "mail of plain"
    assert kinds.build(row(mailing_id=3)) == "mail of mailing"
    assert kinds.build(row(raw_size=9)) == "mail of raw"
    assert kinds.handling(row(raw_size=9)).send_again(None, "staff", 3) == (
        MessageKind.RAW, "staff", 3,
    )  # fmt: skip


def test_a_kind_is_registered_once(bare):
    kinds.on_kind(bare, MessageKind.RAW, build=print, send_again=print)
    with pytest.raises(ValueError, match="raw messages are handled already"):
        kinds.on_kind(bare, MessageKind.RAW, build=print, send_again=print)


def test_a_kind_nothing_registered_is_refused_by_name(bare):
    kinds.on_kind(bare, MessageKind.PLAIN, build=print, send_again=print)
    with pytest.raises(LookupError, match="nothing handles mailing messages"):
        kinds.build(row(mailing_id=1))


def test_an_app_has_hooks_of_its_own(bare):
    other = Flask("other")
    hooks.on_recorded(other, print)
    assert hooks.of(bare).recorded == []
    assert hooks.of(other).recorded == [print]


def test_the_screens_run_in_turn_and_their_marks_add_up_in_order(bare):
    seen = []

    def first(rows, now, *, batch):
        seen.append(("first", [r["n"] for r in rows], batch))
        rows[2]["marked"] = True
        return {2: 1}

    def second(rows, now, *, batch):
        seen.append(("second", [r.get("marked", False) for r in rows], batch))
        return {0: 1, 2: 2}

    hooks.on_store(bare, first, lambda stored, now: None)
    hooks.on_store(bare, second, lambda stored, now: None)
    rows = [{"n": n} for n in range(3)]
    assert hooks.screened(rows, NOW, batch=True) == [0, 2]
    assert seen == [("first", [0, 1, 2], True), ("second", [False, False, True], True)]


def test_no_screen_marks_nothing_and_announces_to_no_one(bare):
    assert hooks.screened([{"n": 0}], NOW) == []
    hooks.announce([(1, {"n": 0})], NOW)  # nothing registered: nothing to call


def test_a_refusing_screen_stops_the_rest(bare):
    later = []

    def refuse(rows, now, *, batch):
        raise ValueError("on the list")

    hooks.on_store(bare, refuse, print)
    hooks.on_store(bare, lambda rows, now, *, batch: later.append(rows) or {}, print)
    with pytest.raises(ValueError, match="on the list"):
        hooks.screened([{}], NOW)
    assert later == []


def test_announcements_are_told_the_stored_rows_with_their_ids(bare):
    told = []
    hooks.on_store(bare, lambda rows, now, *, batch: {}, lambda s, now: told.append((s, now)))
    hooks.announce([(41, {"n": 0})], NOW)
    assert told == [([(41, {"n": 0})], NOW)]


def test_outcomes_hooks_run_in_order_then_the_new_statuses(bare):
    calls = []
    hooks.on_recorded(bare, lambda statuses: calls.append(("recorded", dict(statuses))))
    hooks.on_outcomes(bare, lambda written: calls.append(("suppression", written.finished)))
    hooks.on_outcomes(bare, lambda written: calls.append(("events", written.errors)))
    done = SimpleNamespace(claim=SimpleNamespace(id=5))
    hooks.written(hooks.Written([done], [(done, "gave up")], {5: Status.FAILED}))
    assert calls == [
        ("suppression", [done]),
        ("events", [(done, "gave up")]),
        ("recorded", {5: Status.FAILED}),
    ]


def test_a_claim_taken_back_runs_its_hooks_then_its_new_status(bare):
    calls = []
    hooks.on_recorded(bare, lambda statuses: calls.append(dict(statuses)))
    hooks.on_lost(bare, lambda *told: calls.append(told))
    hooks.lost(8, "<a@b>", Status.DEFERRED, "worker lost", NOW)
    assert calls == [(8, "<a@b>", Status.DEFERRED, "worker lost", NOW), {8: Status.DEFERRED}]


def test_requeue_hooks_each_name_the_ids_left_with_no_one(bare):
    asked = []

    def one(ids):
        asked.append(ids)
        return {1}

    hooks.on_requeue(bare, one)
    hooks.on_requeue(bare, lambda ids: {2} if ids is None else set())
    assert hooks.requeue(None) == {1, 2}
    assert hooks.requeue([1, 3]) == {1}
    assert asked == [None, [1, 3]]
