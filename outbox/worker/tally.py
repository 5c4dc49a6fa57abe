"""What a drain pass did, counted: its one log line, and the figures the callers read."""

from dataclasses import dataclass


@dataclass
class Tally:
    sent: int = 0
    deferred: int = 0
    failed: int = 0
    released: int = 0  # handed back unstarted on a stop
    reclaimed: int = 0  # taken back from workers that died
    lost: int = 0  # outcomes not recorded because the claim had passed to another worker
    held: int = 0  # handed back to wait for a rate limit's turn (throttle), not attempted
    paused: bool = False  # stopped claiming because sending is paused (outbox.pause)
    # Why sending stopped: a fault of the server or the settings, not of the messages.
    fault: str | None = None

    def add(self, other: "Tally") -> None:
        for name in self.__dataclass_fields__:
            if name not in ("fault", "paused"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
        self.fault = other.fault or self.fault
        self.paused = other.paused or self.paused

    def __str__(self) -> str:
        return f"sent {self.sent}, deferred {self.deferred}, failed {self.failed}"

    def summary(self, seconds: float) -> str | None:
        """The pass's one log line, or None if it did nothing (an idle worker is quiet)."""
        if not (self.sent or self.deferred or self.failed or self.released or self.reclaimed
                or self.held):  # fmt: skip
            return None
        more = [f"took back {self.reclaimed} from dead workers"] if self.reclaimed else []
        more += [f"handed back {self.released}"] if self.released else []
        more += [f"held back {self.held} for rate limits"] if self.held else []
        return ", ".join([str(self), *more]) + f" in {seconds:.1f} s"
