"""A worker process keeps several SMTP connections busy at once, within each route's limit."""

import pytest

from outbox import smtp
from outbox.capabilities import routes
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.smtpd import SmtpServer


def route(name: str, server: SmtpServer, connections: int) -> routes.Route:
    settings = smtp.HostSettings(server="127.0.0.1", port=server.port, timeout=10.0)
    return routes.Route(name, settings, max_connections=connections)


def statuses() -> dict[str, int]:
    found: dict[str, int] = {}
    for (status,) in db.session.execute(db.select(Message.status)):
        found[status] = found.get(status, 0) + 1
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_a_process_sends_over_several_connections_at_once_and_each_mail_once(
    smtp_app, smtp, make_message
):
    smtp_app.config.update(MAIL_MAX_CONNECTIONS=4, BATCH_SIZE=8)  # lanes claim 8 each
    smtp.recorder.data_wait = 0.3  # a far server: each mail's reply waits, the others go on
    due = [make_message(subject=f"n{n}") for n in range(24)]
    tally = Worker().drain()
    assert (tally.sent, tally.deferred, tally.failed, tally.lost) == (24, 0, 0, 0)
    assert sorted(smtp.recorder.message_ids()) == sorted(m.message_id for m in due)
    assert 2 <= smtp.recorder.most_in_data <= 4
    assert smtp.recorder.connections <= 4
    assert statuses() == {Status.SENT: 24}


def test_a_route_never_gets_more_connections_than_its_limit(app, make_message):
    one, other = SmtpServer().start(), SmtpServer().start()
    try:
        one.recorder.data_wait = other.recorder.data_wait = 0.1
        app.config["BATCH_SIZE"] = 4
        # Four lanes (1 + 3 connections), every message through the first route.
        table = routes.Table({"one": route("one", one, 1), "other": route("other", other, 3)})
        app.extensions["outbox.routes"] = table
        due = [make_message(subject=f"n{n}") for n in range(16)]
        assert Worker().drain().sent == 16
        assert sorted(one.recorder.message_ids()) == sorted(m.message_id for m in due)
        assert (one.recorder.connections, one.recorder.most_in_data) == (1, 1)
        assert other.recorder.received == []
    finally:
        one.stop()
        other.stop()


@pytest.mark.all_databases
def test_a_stop_while_lanes_send_hands_back_every_message_not_sent(smtp_app, smtp, make_message):
    smtp_app.config.update(MAIL_MAX_CONNECTIONS=3, BATCH_SIZE=6)
    smtp.recorder.data_wait = 0.2
    worker = Worker()
    sent: list[int] = []

    def stop_after_four() -> None:
        sent.append(1)
        if len(sent) == 4:
            worker.stop.set()

    smtp.recorder.on_data = stop_after_four
    for n in range(30):
        make_message(subject=f"n{n}")
    tally = worker.drain()
    received = len(smtp.recorder.message_ids())
    found = statuses()
    assert found.get(Status.SENT, 0) == tally.sent == received
    assert found.get(Status.SENDING, 0) == 0  # nothing is left claimed
    assert (
        found.get(Status.QUEUED, 0) == 30 - received
    )  # claimed ones handed back, or never claimed
    assert 0 < tally.released <= 30 - received
