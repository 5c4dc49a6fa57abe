"""The mails of every connection stored by one thread, those that wait stored together.

`outbox smtpd` answers a DATA only once its mail is committed. A connection's mail is
handed to the committer, whose thread takes every mail waiting when it is free (up to
MOST mails or MOST_BYTES) and stores them in one transaction (store.queue_many): one
INSERT of the rows, one of their bytes, one COMMIT for all, where each mail alone
would take three round trips and the per-statement work three times over. A mail that
comes while the thread is idle is stored at once, alone: no mail waits for company.

The thread starts with the first mail and ends after LINGER seconds with none.
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from flask import Flask

from outbox.capabilities.submission import Queued
from outbox.capabilities.submission.store import Submitted, queue_many

MOST = 64  # mails a transaction
MOST_BYTES = 8 << 20  # their bytes a transaction, beyond the first mail
LINGER = 1.0  # seconds the thread waits for another mail before it ends

Waiting = tuple[Submitted, asyncio.Future[Queued], asyncio.AbstractEventLoop]


class Committer:
    """Stores the mails handed to store(), from any event loop, in a thread of its own."""

    def __init__(self, app: Flask, store: Callable[[list[Submitted]], list[Any]] = queue_many):
        self.app = app
        self.store_many = store
        self.waiting: list[Waiting] = []
        self.ready = threading.Condition()
        self.running = False

    async def store(self, mail: Submitted) -> Queued:
        """The mail's Queued once it is committed, or the exception queue_raw would raise."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Queued] = loop.create_future()
        with self.ready:
            self.waiting.append((mail, future, loop))
            if self.running:
                self.ready.notify()
            else:
                self.running = True
                threading.Thread(target=self._run, name="smtpd-committer", daemon=True).start()
        return await future

    def _take(self) -> list[Waiting]:
        """The mails to store next, or none once none came for LINGER seconds."""
        with self.ready:
            if not self.waiting:
                self.ready.wait(LINGER)
            size, taken = 0, 0
            for mail, _, _ in self.waiting[:MOST]:
                if taken and size + len(mail.data) > MOST_BYTES:
                    break
                size, taken = size + len(mail.data), taken + 1
            group, self.waiting[:taken] = self.waiting[:taken], []
            if not group:
                self.running = False
            return group

    def _run(self) -> None:
        with self.app.app_context():
            while group := self._take():
                try:
                    answers: list[Any] = self.store_many([mail for mail, _, _ in group])
                except Exception as exc:  # a fault of outbox's: each mail is told, as alone
                    answers = [exc] * len(group)
                for (_, future, loop), answer in zip(group, answers, strict=True):
                    try:
                        loop.call_soon_threadsafe(_settle, future, answer)
                    except RuntimeError:  # its loop is closed: the server stopped
                        pass


def _settle(future: asyncio.Future[Queued], answer: Queued | Exception) -> None:
    if future.done():  # its connection went away meanwhile
        return
    if isinstance(answer, Exception):
        future.set_exception(answer)
    else:
        future.set_result(answer)
