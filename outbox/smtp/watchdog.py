"""A deadline watcher for sends: one thread, armed anew for each send."""

import threading
import time
from collections.abc import Callable

from outbox.core.status import WATCHDOG_LATENESS


class Watchdog:
    """One thread that calls on_expiry once a deadline has passed; armed anew for each send.

    It looks at the deadline once per WATCHDOG_LATENESS of the armed period, so it fires at
    most that much late (status.Lease counts on it). Arming and disarming never wake it:
    a timer thread per message, or a notify per message, cost more than the rest of the
    bookkeeping.
    """

    def __init__(self, on_expiry: Callable[[], None]) -> None:
        self.on_expiry = on_expiry
        self.deadline: float | None = None
        self.tick = 1.0
        self.closed = False
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    def arm(self, seconds: float) -> None:
        with self.changed:
            self.deadline = time.monotonic() + seconds
            self.tick = seconds * WATCHDOG_LATENESS
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
                self.thread.start()

    def disarm(self) -> None:
        with self.changed:
            self.deadline = None

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify()
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def _watch(self) -> None:
        with self.changed:
            while not self.closed:
                now = time.monotonic()
                if self.deadline is not None and now >= self.deadline:
                    self.deadline = None
                    self.on_expiry()
                    continue
                left = self.tick if self.deadline is None else self.deadline - now
                self.changed.wait(min(left, self.tick))
