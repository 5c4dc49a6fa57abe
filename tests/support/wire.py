"""A recording aiosmtpd relay for wire tests, and one message sent through a given server."""

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.controller import Controller

from outbox.mail.rendered import Features
from outbox.worker import Tally, Worker

from .smtpd import free_port


@dataclass
class Got:
    mail_from: str
    rcpt_tos: list[str]
    options: list[str]
    content: bytes


@dataclass
class Handler:
    """aiosmtpd handler that records each mail with its MAIL FROM options."""

    eight_bit: bool
    received: list[Got] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # type: ignore[no-untyped-def]  # noqa: N802
        session.host_name = hostname
        if not self.eight_bit:
            responses = [r for r in responses if r[4:] != "8BITMIME"]
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        got = Got(envelope.mail_from, list(envelope.rcpt_tos), list(envelope.mail_options),
                  envelope.original_content or envelope.content)  # fmt: skip
        with self.lock:
            self.received.append(got)
        return "250 OK"


@dataclass
class WireServer:
    port: int
    offers: Features
    received: Callable[[], list[Got]]


@contextlib.contextmanager
def aiosmtpd_server(offers: Features) -> Iterator[WireServer]:
    handler, port = Handler(offers.eight_bit), free_port()
    kwargs: dict[str, Any] = {"enable_SMTPUTF8": offers.smtputf8}
    controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield WireServer(port, offers, lambda: list(handler.received))
    finally:
        controller.stop()


def send(app, make_message, server, **fields):  # type: ignore[no-untyped-def]
    """Queue one message, drain it to server, and give the message and what was delivered."""
    mail = app.extensions["mail"]
    app.config["MAIL_SERVER"] = mail.server = server.host
    app.config["MAIL_PORT"] = mail.port = server.port
    message = make_message(**fields)
    assert Worker().drain() == Tally(sent=1)
    return message, server.delivered()
