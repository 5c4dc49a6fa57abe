"""A route's transport trouble moves a message on to the next route; a refusal never does."""

import threading

import pytest

from outbox import smtp
from outbox.capabilities import routes
from outbox.capabilities.routes import health
from outbox.core.status import Status
from outbox.models import Attempt, Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.smtpd import SilentServer, SmtpServer, free_port


def route(name: str, port: int, timeout: float = 10.0) -> routes.Route:
    settings = smtp.HostSettings(server="127.0.0.1", port=port, timeout=timeout)
    return routes.Route(name, settings, max_connections=1)


def use(app, *chain: routes.Route) -> None:  # type: ignore[no-untyped-def]
    """Every message through the first route, then the others in turn (a catch-all rule)."""
    rule = routes.Rule(chain[0].name, fallback=tuple(r.name for r in chain[1:]))
    app.extensions[routes.KEY] = routes.Table({r.name: r for r in chain}, rules=(rule,))
    health.forget()


def attempt_routes(message_id: int) -> list[str | None]:
    found = db.session.scalars(
        db.select(Attempt.route).where(Attempt.message_pk == message_id).order_by(Attempt.id)
    )
    return list(found)


def row(message_id: int) -> Message:
    found = db.session.get(Message, message_id, populate_existing=True)
    assert found is not None
    return found


@pytest.fixture
def backup():  # type: ignore[no-untyped-def]
    server = SmtpServer().start()
    yield server
    server.stop()


@pytest.mark.all_databases
def test_an_unreachable_route_fails_over_to_the_next(app, backup, make_message):
    use(app, route("down", free_port()), route("backup", backup.port))
    due = [make_message(subject=f"n{n}") for n in range(5)]
    tally = Worker().drain()
    assert (tally.sent, tally.deferred, tally.fault) == (5, 0, None)
    assert sorted(backup.recorder.message_ids()) == sorted(m.message_id for m in due)
    assert all(row(m.id).status == Status.SENT for m in due)
    # One attempt each, through the route that took it; the routes page sees both.
    assert all(attempt_routes(m.id) == ["backup"] for m in due)
    seen = health.read(["down", "backup"])
    assert seen["down"].faults >= 1 and "127.0.0.1:" in (seen["down"].fault or "")
    assert seen["backup"].ok_at is not None and seen["backup"].faults == 0


def test_a_421_greeting_fails_over(app, backup, make_message):
    closing = SmtpServer().start()
    try:
        closing.recorder.mail_replies["outbox@example.com"] = "421 4.3.2 Service shutting down"
        use(app, route("closing", closing.port), route("backup", backup.port))
        message = make_message()
        assert Worker().drain().sent == 1
        assert backup.recorder.message_ids() == [message.message_id]
        assert closing.recorder.received == []
    finally:
        closing.stop()


def test_a_silent_route_times_out_then_fails_over(app, backup, make_message):
    with SilentServer(hang_up_after=10.0) as silent:
        use(app, route("silent", silent.port, timeout=0.5), route("backup", backup.port))
        message = make_message()
        assert Worker().drain().sent == 1
    assert backup.recorder.message_ids() == [message.message_id]


@pytest.mark.parametrize("reply", ["550 5.1.1 No such user", "450 4.2.1 Mailbox busy"])
def test_a_recipients_refusal_never_fails_over(app, smtp, backup, make_message, reply):
    smtp.recorder.rcpt_replies["rcpt@example.com"] = reply
    use(app, route("first", smtp.port), route("backup", backup.port))
    message = make_message()
    tally = Worker().drain()
    assert backup.recorder.received == []
    expected = Status.FAILED if reply.startswith("5") else Status.DEFERRED
    assert row(message.id).status == expected
    assert tally.fault is None
    assert attempt_routes(message.id) == ["first"]


def test_when_every_route_is_down_the_messages_wait_and_the_pass_ends(app, make_message):
    use(app, route("down", free_port()), route("also-down", free_port()))
    due = [make_message(subject=f"n{n}") for n in range(3)]
    tally = Worker().drain()
    assert tally.deferred == 3 and tally.fault is not None
    assert "also-down" not in tally.fault and "127.0.0.1:" in tally.fault
    for message in due:
        found = row(message.id)
        assert (found.status, found.locked_by) == (Status.DEFERRED, None)
        assert attempt_routes(message.id) == ["also-down"]  # the last route tried


def test_the_next_batch_tries_the_first_route_again(app, make_message):
    first, backup = SmtpServer().start(), SmtpServer().start()
    try:
        port = first.port
        first.stop()  # down for the first pass
        use(app, route("first", port), route("backup", backup.port))
        make_message(subject="while down")
        assert Worker().drain().sent == 1
        assert len(backup.recorder.received) == 1
        first = SmtpServer()
        first.port = port
        first.controller.port = port
        first.start()
        make_message(subject="back up")
        assert Worker().drain().sent == 1
        assert len(first.recorder.received) == 1 and len(backup.recorder.received) == 1
    finally:
        first.stop()
        backup.stop()


@pytest.mark.all_databases
def test_a_mail_that_fails_over_takes_its_domains_token_once(app, backup, make_message):
    """The down route never reached the recipient's domain, so the backup takes only its own
    route's token: a domain limited to one mail a second (a bucket of one) sends the mail
    at once, not held back for a second token."""
    down, up = route("down", free_port()), route("backup", backup.port)
    rule = routes.Rule("down", fallback=("backup",))
    app.extensions[routes.KEY] = routes.Table({"down": down, "backup": up}, (rule,),
                                              {"example.com": 1.0})  # fmt: skip
    health.forget()
    message = make_message(to=["ann@example.com"])
    worker, tallies = Worker(), []

    def drain() -> None:
        with app.app_context():
            tallies.append(worker.drain())

    # Charged twice, it was held back at the backup every time, due again a second later
    # when the down route took the refilled token again: the pass never ended.
    draining = threading.Thread(target=drain)
    draining.start()
    draining.join(20)
    worker.stop.set()
    draining.join(30)
    assert [(t.sent, t.held) for t in tallies] == [(1, 0)]
    assert backup.recorder.message_ids() == [message.message_id]
    assert attempt_routes(message.id) == ["backup"]
