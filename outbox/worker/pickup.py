"""Immediate pickup: an idle worker starts a pass as soon as a due message is stored.

The scheduler's tick (POLL_INTERVAL) stays the sweep; this only starts passes sooner.
A wake-up that comes while a pass runs is kept (woken stays set) and starts one more
pass after it: the pass in hand may have looked for due messages just before the new
one was committed.
"""

import threading
from collections.abc import Callable

from flask import Flask

from outbox.models.db import db
from outbox.queue import wakeups


class Pickup:
    """The threads that wait for wake-ups and run a pass on each (start() starts them)."""

    def __init__(
        self, app: Flask, run_pass: Callable[[], None], busy: threading.Lock, stop: threading.Event
    ) -> None:
        self.app, self.run_pass, self.busy, self.stop = app, run_pass, busy, stop
        self.woken = threading.Event()
        self.interval = float(app.config["WAKE_INTERVAL"])
        self.listener: wakeups.Listener | None = None
        self.threads: list[threading.Thread] = []
        with app.app_context():
            if db.engine.dialect.name == "postgresql":
                self.listener = wakeups.Listener(db.engine, self.woken, stop)

    def says(self) -> str:
        """How this worker is woken, for its first log line."""
        if self.listener is not None:
            return f", woken by NOTIFY on {wakeups.CHANNEL}"
        return f", probing for new messages every {self.interval:g}s"

    def start(self) -> None:
        """Start waiting (after the process has blocked its stop signals: catch_stops)."""
        if self.listener is not None:
            self.threads.append(threading.Thread(target=self.listener.run, name="listen"))
        self.threads.append(threading.Thread(target=self._wait, name="pickup"))
        for thread in self.threads:
            thread.daemon = True
            thread.start()

    def _wait(self) -> None:
        """Run a pass on each wake-up until stop; without a listener, probe for one."""
        probing = self.listener is None
        seen = self._newest() if probing else None
        while not self.stop.is_set():
            if not self.woken.wait(self.interval if probing else 1.0):
                if not probing or self.busy.locked():
                    continue  # a pass running now claims what is new anyway
                newest = self._newest()
                if newest is None or (seen is not None and newest <= seen):
                    continue
                seen = newest
            self.woken.clear()
            self.run_pass()

    def _newest(self) -> int | None:
        """The newest message id, or None while the database cannot be reached."""
        with self.app.app_context():
            try:
                return wakeups.newest_id()
            except Exception:  # an outage: the tick logs it; keep probing quietly
                db.session.rollback()
                return None
            finally:
                db.session.remove()
