"""Immediate pickup: an idle worker starts a pass as soon as a due message is stored.

The scheduler's tick (POLL_INTERVAL) stays the sweep; this only starts passes sooner.
A wake-up that comes while a pass runs is kept (woken stays set) and starts one more
pass after it: the pass in hand may have looked for due messages just before the new
one was committed. Where the worker probes (no NOTIFY), a ring of its doorbell
(queue.doorbell) wakes it too, without waiting for the next probe.
"""

import threading
from collections.abc import Callable

from flask import Flask

from outbox.models.db import db
from outbox.queue import doorbell, wakeups


class Pickup:
    """The threads that wait for wake-ups and run a pass on each (start() starts them)."""

    def __init__(
        self, app: Flask, run_pass: Callable[[], None], busy: threading.Lock, stop: threading.Event
    ) -> None:
        self.app, self.run_pass, self.busy, self.stop = app, run_pass, busy, stop
        self.woken = threading.Event()
        self.interval = float(app.config["WAKE_INTERVAL"])
        self.listener: wakeups.Listener | None = None
        self.probe: wakeups.Probe | None = None
        self.bell: doorbell.Bell | None = None
        self.threads: list[threading.Thread] = []
        with app.app_context():
            if db.engine.dialect.name == "postgresql":
                self.listener = wakeups.Listener(db.engine, self.woken, stop)
            else:
                self.probe = wakeups.Probe(db.engine)

    def says(self) -> str:
        """How this worker is woken, for its first log line."""
        if self.listener is not None:
            return f", woken by NOTIFY on {wakeups.CHANNEL}"
        return f", probing for new messages every {self.interval:g}s and woken by its doorbell"

    def start(self) -> None:
        """Start waiting (after the process has blocked its stop signals: catch_stops)."""
        if self.listener is not None:
            self.threads.append(threading.Thread(target=self.listener.run, name="listen"))
        if self.probe is not None:
            self.bell = doorbell.Bell(self.app, self.woken)
            bell = threading.Thread(target=self.bell.run, args=(self.stop,), name="doorbell")
            self.threads.append(bell)
        self.threads.append(threading.Thread(target=self._wait, name="pickup"))
        for thread in self.threads:
            thread.daemon = True
            thread.start()

    def _wait(self) -> None:
        """Run a pass on each wake-up until stop; without a listener, probe for one."""
        probe = self.probe
        seen = probe.newest() if probe is not None else None
        while not self.stop.is_set():
            if not self.woken.wait(self.interval if probe is not None else 1.0):
                if probe is None or self.busy.locked():
                    continue  # a pass running now claims what is new anyway
                newest = probe.newest()
                if newest is None or (seen is not None and not newest.grew(seen)):
                    continue  # nothing new, or the database away: the tick retries
                seen = newest
            elif probe is not None:  # rung: what the pass will see is seen, or the probe
                seen = probe.newest() or seen  # would start a second pass for it
            self.woken.clear()
            self.run_pass()
        if probe is not None:
            probe.close()

    def close(self) -> None:
        """Take the doorbell away (at a stop): a ring then goes to the other workers."""
        if self.bell is not None:
            self.bell.close()
