"""outbox's SMTP servers (`outbox smtpd`, `outbox bounces --listen`) run on one base.

A server is a handler (what it does with a mail) and a Connection class (aiosmtpd's
protocol, let in by the handler's Admission), served on one or more ports, each with or
without TLS from the first byte. Server runs them in this thread's event loop until
SIGTERM or SIGINT, then closes the ports and waits up to STOP_WITHIN for every DATA
under way to get its answer: a mail cut off before its reply is the client's to send
again. in_thread serves them in a thread of their own (aiosmtpd's Controller), for tests.
"""

import asyncio
import logging
import signal
import ssl
from collections.abc import Mapping
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

from outbox.smtp import admission

log = logging.getLogger("outbox.admission")  # the refusals of connections past the caps
STOPS = (signal.SIGINT, signal.SIGTERM)
STOP_WITHIN = 20.0  # seconds a stop waits for mails under way; outbox-smtpd.service allows 30


class Handler:
    """What every server's handler holds besides its hooks: its Admission, its DATA under way."""

    def __init__(self, limits: admission.Limits) -> None:
        self.admission = admission.Admission(limits)
        self.in_flight = 0  # DATA commands under way; on the loop's thread only


class Connection(SMTP):
    """aiosmtpd's protocol for one client: let in only within the handler's Admission, its
    DATA counted while under way.

    A 421 from any hook closes the connection (RFC 5321 3.8).
    """

    event_handler: Handler

    def __init__(self, handler: Handler, **options: Any) -> None:
        super().__init__(handler, **options)
        self.admission = handler.admission
        self.client: str | None = None  # set while counted in
        self.refusal: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        after_starttls = self._original_transport is not None  # the same client, now in TLS
        super().connection_made(transport)
        if after_starttls:
            return
        client = admission.client_of(transport.get_extra_info("peername"))
        self.refusal = self.admission.enter(client)
        if self.refusal is None:
            self.client = client
        else:
            log.info("connection from %s refused: %s", client, self.refusal)

    def connection_lost(self, error: Exception | None) -> None:
        if self.client is not None:
            self.admission.leave(self.client)
            self.client = None
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.refusal is None:
            await super()._handle_client()
            return
        self._writer.write(f"{self.refusal}\r\n".encode())
        if self.transport is not None:
            self.transport.close()

    async def push(self, status: Any) -> None:
        await super().push(status)
        if isinstance(status, str) and status.startswith("421") and self.transport:
            self.transport.close()

    async def smtp_DATA(self, arg: str) -> None:  # noqa: N802 (aiosmtpd's command names)
        self.event_handler.in_flight += 1
        try:
            await super().smtp_DATA(arg)
        finally:
            self.event_handler.in_flight -= 1


class Server:
    """A handler's connections served on the ports given to listen(), in this thread.

    Used as a context manager: the event loop is made on entering and closed on leaving.
    """

    def __init__(self, connection: type[Connection], handler: Handler) -> None:
        """ValueError if this process may not open the files the handler's caps need."""
        admission.open_files_for(handler.admission.limits)
        self.connection = connection
        self.handler = handler
        self.listening: list[asyncio.Server] = []

    def __enter__(self) -> "Server":
        self.loop = asyncio.new_event_loop()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()

    def listen(
        self, host: str, port: int, options: Mapping[str, Any], tls: ssl.SSLContext | None = None
    ) -> None:
        """Take connections on host:port, TLS from the first byte with tls; OSError if it cannot.

        options: the keyword arguments of each Connection (aiosmtpd's SMTP).
        """

        def connected() -> Connection:
            return self.connection(self.handler, loop=self.loop, **options)

        made = self.loop.create_server(connected, host, port, ssl=tls)
        self.listening.append(self.loop.run_until_complete(made))

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop: the DATA under way first get their answer."""
        stopping = asyncio.Event()
        for sig in STOPS:
            self.loop.add_signal_handler(sig, stopping.set)
        self.loop.run_until_complete(self._until_stopped(stopping))
        self.loop.run_until_complete(_end_connections())

    async def _until_stopped(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        for each in self.listening:
            each.close()
        deadline = self.loop.time() + STOP_WITHIN
        while self.handler.in_flight and self.loop.time() < deadline:
            await asyncio.sleep(0.05)


async def _end_connections() -> None:
    """Cancel the sessions still open (between mails, or past STOP_WITHIN) and wait for them."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _Threaded(Controller):
    """aiosmtpd's Controller making a Connection of the given class for each client."""

    def __init__(self, connection: type[Connection], handler: Handler, **options: Any) -> None:
        self.connection = connection
        super().__init__(handler, **options)

    def factory(self) -> SMTP:
        return self.connection(self.handler, **self.SMTP_kwargs)


def in_thread(
    connection: type[Connection], handler: Handler, host: str, port: int,
    options: Mapping[str, Any], tls: ssl.SSLContext | None = None,
) -> Controller:  # fmt: skip
    """The server in a thread of this process, listening on host:port from its return.

    For tests; stop() ends it, cutting off any mail under way. tls: TLS from the first byte.
    """
    controller = _Threaded(connection, handler, hostname=host, port=port, ssl_context=tls,
                           **options)  # fmt: skip
    try:
        controller.start()
    except BaseException:
        controller.loop.close()  # aiosmtpd leaves the loop of a server that never started
        raise
    return controller
