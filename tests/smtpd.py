"""A real SMTP server on loopback for the tests: records what it gets, fails on request."""

import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes

    @property
    def message_id(self) -> str:
        return message_from_bytes(self.content)["Message-ID"]


@dataclass
class Recorder:
    """aiosmtpd handler; set rcpt_replies, data_reply or delay to make it misbehave."""

    received: list[Received] = field(default_factory=list)
    rcpt_replies: dict[str, str] = field(default_factory=dict)
    data_reply: str | None = None
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        reply = self.rcpt_replies.get(address)
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        if self.delay:
            time.sleep(self.delay)  # block the loop: a slow server, one mail at a time
        if self.data_reply:
            return self.data_reply
        with self.lock:
            self.received.append(
                Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.content)
            )
        return "250 OK queued"

    def message_ids(self) -> list[str]:
        with self.lock:
            return [r.message_id for r in self.received]


class SmtpServer:
    """A started aiosmtpd server on a free loopback port."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.port = free_port()
        self.controller = Controller(self.recorder, hostname="127.0.0.1", port=self.port)

    def start(self) -> "SmtpServer":
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    @property
    def received(self) -> list[Received]:
        return self.recorder.received
