"""Log output of outbox's processes: human lines, or one JSON object a line (LOG_FORMAT)."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(message)s"
# Libraries' loggers that say something on every run of a job or every SMTP command:
# a line per tick of an idle worker, a line per command in the demo's SMTP server.
# Their warnings and errors still show.
CHATTY = ("apscheduler.scheduler", "apscheduler.executors.default", "mail.log")
# The attributes every LogRecord has; any other one came in through `extra=`.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object a record: time (UTC), level, logger, message, exception, extras.

    The standard library's, not python-json-logger: the fields are these few and fixed,
    and a dependency would bring renaming and encoder options nobody here sets.
    """

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        # One line whatever the message holds: json.dumps escapes every line break.
        return json.dumps(entry, default=str, ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    """The formatter a LOG_FORMAT value names (one of FORMATS)."""
    if name not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {name!r}")
    return JsonFormatter() if name == "json" else logging.Formatter(TEXT)


def setup(name: str = "text") -> None:
    """Log INFO and above to stderr in the format name; libraries' per-run lines off.

    Leaves a root logger that already has handlers as it is (a test's log capture,
    an embedding application's own setup).
    """
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(name))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for chatty in CHATTY:
        logging.getLogger(chatty).setLevel(logging.WARNING)
