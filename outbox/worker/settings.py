"""The worker's settings: its ticks, wake-ups and claims, how outcomes are recorded, retries."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import BOOL, INT, NUMBER, Group, Setting
from outbox.core.status import shortest_lock_timeout


def check(config: Mapping[str, Any]) -> None:
    """Refuse settings that would break the queue's guarantees (status.Lease)."""
    if config["LOCK_TIMEOUT"] < shortest_lock_timeout(config["SMTP_TIMEOUT"]):
        raise ValueError(
            "LOCK_TIMEOUT must be at least 4 x SMTP_TIMEOUT, or a send cut off at half of it "
            "could not wait out two slow replies of the SMTP server"
        )
    if config["BATCH_SIZE"] < 1 or config["MAX_ATTEMPTS"] < 1 or config["RECORD_EVERY"] < 1:
        raise ValueError("BATCH_SIZE, MAX_ATTEMPTS and RECORD_EVERY must be at least 1")
    if config["RECORD_AFTER"] <= 0:
        raise ValueError("RECORD_AFTER must be above 0")
    if config["WAKE_INTERVAL"] <= 0:
        raise ValueError("WAKE_INTERVAL must be above 0")
    if config["RETRY_BACKOFF"] < 1:
        raise ValueError("RETRY_BACKOFF must be 1 or more")


# fmt: off
GROUP = Group(
    "Worker and retries",
    "How often the workers look for due messages, how many they take, and when a message "
    "is tried again.",
    (
        Setting("POLL_INTERVAL", NUMBER, 20.0, unit="seconds",
                description="seconds between worker ticks; each tick drains every due message "
                "(retries, scheduled mail, claims of dead workers, anything a wake-up missed)"),
        Setting("WAKE_UPS", BOOL, True,
                description="idle workers start a pass as soon as a message is stored due now "
                "or made due by staff (send now, resend, a mailing or sending resumed): told by "
                "PostgreSQL (`LISTEN`/`NOTIFY`), else by asking the database for the newest "
                "message id and the count of such moves every `WAKE_INTERVAL`; `false` leaves "
                "it to the tick"),
        Setting("WAKE_INTERVAL", NUMBER, 0.05, unit="seconds",
                description="seconds between an idle worker's probes for new messages on "
                "MariaDB, MySQL and SQLite (one statement each: `MAX(id)` and one row by its key)"),
        Setting("BATCH_SIZE", INT, 100, unit="messages",
                description="messages a worker claims at a time; with several connections, each "
                "sending thread claims its share (at least 20)"),
        # One write per default batch; 20 cost a third more CPU.
        Setting("RECORD_EVERY", INT, 100, unit="messages",
                description="outcomes written per commit; a worker that dies sends at most this "
                "many messages again, and no more than it sent in its last `RECORD_AFTER`"),
        Setting("RECORD_AFTER", NUMBER, 1.0, unit="seconds",
                description="seconds an outcome may wait for the rest of its group (at most "
                "`LOCK_TIMEOUT / 8`)"),
        Setting("RETRY_DELAY", NUMBER, 60.0, unit="seconds",
                description="seconds before the first retry"),
        Setting("RETRY_BACKOFF", NUMBER, 2.0,
                description="factor applied per further attempt; `1` means a fixed delay"),
        Setting("RETRY_MAX_DELAY", NUMBER, 3600.0, unit="seconds",
                description="seconds, the longest wait between attempts"),
        Setting("MAX_ATTEMPTS", INT, 10, unit="attempts",
                description="attempts before a message fails for good"),
        Setting("LOCK_TIMEOUT", NUMBER, 900.0, unit="seconds",
                description="seconds after which a claim counts as abandoned by a dead worker; at "
                "least 4 x `SMTP_TIMEOUT`"),
    ),
    check,
)
# fmt: on
