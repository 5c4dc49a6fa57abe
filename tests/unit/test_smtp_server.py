"""The SMTP servers' base: caps at the door, and a stop that answers the mail under way."""

import asyncio
import os
import signal
import smtplib
import socket
import threading
import time
from typing import Any

import pytest

from outbox.smtp import server
from outbox.smtp.admission import Limits
from tests.support.smtpd import free_port


class Held(server.Handler):
    """Keeps each mail's DATA waiting until released, then answers 250."""

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits)
        self.receiving = threading.Event()
        self.release = threading.Event()

    async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.receiving.set()
        await asyncio.to_thread(self.release.wait, 30)
        return "250 2.0.0 kept"


def closed(port: int, within: float = 10.0) -> bool:
    """True once nothing listens on port, if that comes within so many seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.05)
    return False


def test_a_stop_closes_the_port_first_and_the_mail_under_way_still_gets_its_answer():
    handler = Held(Limits(total=10, per_client=10))
    port = free_port()
    seen: dict[str, Any] = {}

    def send() -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
            seen["data"] = client.sendmail("a@example.com", ["b@example.com"], b"Hi\r\n")

    def stop() -> None:
        if not handler.receiving.wait(30):
            return  # the test fails on the missing answer; the server is never stopped
        os.kill(os.getpid(), signal.SIGTERM)
        seen["closed"] = closed(port)
        seen["in_flight"] = handler.in_flight
        handler.release.set()

    threads = [threading.Thread(target=send), threading.Thread(target=stop)]
    with server.Server(server.Connection, handler) as serving:
        serving.listen("127.0.0.1", port, {})
        for thread in threads:
            thread.start()
        serving.run()
    for thread in threads:
        thread.join(30)
    assert seen == {"closed": True, "in_flight": 1, "data": {}}
    assert handler.in_flight == 0 and handler.admission.total == 0


def test_a_client_past_the_caps_is_turned_away_before_the_greeting():
    handler = Held(Limits(total=10, per_client=1))
    port = free_port()
    controller = server.in_thread(server.Connection, handler, "127.0.0.1", port, {})
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as first:
            assert first.noop()[0] == 250
            with pytest.raises(smtplib.SMTPConnectError) as second:
                smtplib.SMTP("127.0.0.1", port, timeout=10)
            assert second.value.smtp_code == 421
            assert second.value.smtp_error.startswith(b"4.7.0 Too many connections from your")
    finally:
        controller.stop()


def test_a_server_whose_caps_need_more_files_than_it_may_open_does_not_start():
    with pytest.raises(ValueError, match="raise LimitNOFILE"):
        server.Server(server.Connection, Held(Limits(total=2**40, per_client=1)))
