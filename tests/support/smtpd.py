"""A real SMTP server on loopback for the tests: records what it gets, fails on request."""

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP


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
    """aiosmtpd handler; set the replies, delay or on_data to make it misbehave.

    data_replies answer one message each, in turn, before data_reply (None: accept)
    answers the rest; data_command_replies likewise refuse the DATA command itself,
    before any data is sent, as Postfix's smtpd_data_restrictions do.
    """

    received: list[Received] = field(default_factory=list)
    refused: list[Received] = field(default_factory=list)  # data answered with an error
    mail_replies: dict[str, str] = field(default_factory=dict)  # by sender address
    rcpt_replies: dict[str, str] = field(default_factory=dict)
    rcpt_limit: int | None = None  # recipients per transaction; 452 to those past it
    data_reply: str | None = None
    data_replies: deque[str] = field(default_factory=deque)
    data_command_replies: deque[str] = field(default_factory=deque)
    delay: float = 0.0  # seconds before answering each message's data
    rcpt_delay: float = 0.0  # seconds before answering each RCPT
    on_data: Callable[[], object] | None = None  # called as each message's data arrives
    # Seconds each reply to DATA's content waits, other connections served meanwhile: a
    # server far away, or a slow one that serves many clients.
    data_wait: float = 0.0
    in_data: int = 0  # connections waiting out data_wait now
    most_in_data: int = 0  # the most that ever did at once
    connections: int = 0  # sessions that said EHLO
    pipelining: bool = True  # offer PIPELINING (aiosmtpd takes commands in a group anyway)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802
        session.host_name = hostname  # aiosmtpd leaves this to a handler that has the hook
        if self.pipelining:
            return [*responses[:-1], "250-PIPELINING", responses[-1]]
        return responses

    async def handle_MAIL(self, server, session, envelope, address, mail_options):  # noqa: N802
        reply = self.mail_replies.get(address)
        if reply:
            return reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        if self.rcpt_delay:
            time.sleep(self.rcpt_delay)
        reply = self.rcpt_replies.get(address)
        if reply:
            return reply
        if self.rcpt_limit is not None and len(envelope.rcpt_tos) >= self.rcpt_limit:
            return "452 4.5.3 Too many recipients"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        if self.on_data:
            self.on_data()
        if self.delay:
            time.sleep(self.delay)  # block the loop: a slow server, one mail at a time
        if self.data_wait:
            with self.lock:
                self.in_data += 1
                self.most_in_data = max(self.most_in_data, self.in_data)
            await asyncio.sleep(self.data_wait)
            with self.lock:
                self.in_data -= 1
        mail = Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.content)
        with self.lock:
            reply = self.data_replies.popleft() if self.data_replies else self.data_reply
            (self.refused if reply else self.received).append(mail)
        return reply or "250 OK queued"

    def greeted(self) -> None:
        with self.lock:
            self.connections += 1

    def data_command_reply(self) -> str | None:
        with self.lock:
            return self.data_command_replies.popleft() if self.data_command_replies else None

    def message_ids(self) -> list[str]:
        with self.lock:
            return [r.message_id for r in self.received]


class RecordingSMTP(SMTP):
    """aiosmtpd's protocol, telling the recorder about each EHLO and DATA command."""

    async def smtp_EHLO(self, hostname: str) -> None:  # noqa: N802
        self.event_handler.greeted()
        await super().smtp_EHLO(hostname)

    async def smtp_DATA(self, arg: str) -> None:  # noqa: N802
        reply = self.event_handler.data_command_reply()
        if reply:
            await self.push(reply)
            return
        await super().smtp_DATA(arg)


class RecordingController(Controller):
    def factory(self) -> SMTP:
        return RecordingSMTP(self.handler, **self.SMTP_kwargs)


class SmtpServer:
    """A started aiosmtpd server on a free loopback port."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.port = free_port()
        self.controller = RecordingController(self.recorder, hostname="127.0.0.1", port=self.port)

    def start(self) -> "SmtpServer":
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    @property
    def received(self) -> list[Received]:
        return self.recorder.received


class SilentServer:
    """A loopback port whose server accepts connections and never says a word.

    After hang_up_after seconds it hangs up and stops listening, so a client
    without a timeout fails its test rather than holding it forever.
    """

    def __init__(self, hang_up_after: float = 10.0) -> None:
        self.hang_up_after = hang_up_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port: int = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        deadline = time.monotonic() + self.hang_up_after
        while not self.done.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)
        for conn in self.accepted:
            conn.close()
        self.listener.close()  # refuse later connections too

    def __enter__(self) -> "SilentServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
