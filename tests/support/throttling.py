"""A process that takes one bucket's tokens as fast as it can, for the concurrency test.

`python -m tests.support.throttling hammer NAME RATE SECONDS` (OUTBOX_DATABASE_URL set) takes
tokens of bucket NAME for SECONDS from when it reads a line, and prints for each it got
the time it asked with (its now, Unix seconds), one a line, then `asked FIRST LAST`: the
times of its first and last ask.
"""

import sys
import time
from datetime import UTC, datetime

from outbox import create_app, queue
from outbox.capabilities import routes
from outbox.capabilities.throttle import keys, taking
from outbox.models import utcnow


def hammer(name: str, rate: float, seconds: float) -> None:
    """Ask for three tokens at a time (three claims), as a worker's batch does.

    Says "ready" once started, and begins when it reads a line (so that all begin at once).
    """
    app = create_app()
    needs = keys.Needs({name: rate}, {})
    with app.app_context():
        print("ready", flush=True)
        sys.stdin.readline()
        end, first = time.monotonic() + seconds, None
        while time.monotonic() < end:
            now = utcnow()
            first = first or now
            # No message has these ids: the hand-back of those held back moves nothing.
            claims = [queue.Claim(-n, "hammer", 0, 1, now) for n in range(1, 4)]
            admitted, _ = taking.take([(c, needs) for c in claims], now)
            for _ in admitted:
                print(unix(now), flush=True)
        print(f"asked {unix(first or now)} {unix(now)}", flush=True)


def unix(moment: datetime) -> float:
    return moment.replace(tzinfo=UTC).timestamp()


if __name__ == "__main__":
    hammer(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))


def with_limits(app, domains: dict[str, float], rate: float | None = None) -> routes.Route:  # type: ignore[no-untyped-def]
    """Set the app's routes table to these limits; the route the worker would use."""
    table = routes.table()
    route = routes.Route("relay", next(iter(table.routes.values())).settings, rate=rate)
    app.extensions["outbox.routes"] = routes.Table({"relay": route}, domains=domains)
    return route
