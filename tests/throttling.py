"""Processes for the throttling tests: a worker whose routes have per-domain limits, and a
process that takes one bucket's tokens as fast as it can.

`python -m tests.throttling worker DOMAINS_JSON`, with the OUTBOX_* environment of
`outbox worker`: a worker like `outbox worker`, its app's routes table given those
per-domain limits ({"example.com": 10}). `python -m tests.throttling hammer NAME RATE
SECONDS` (OUTBOX_DATABASE_URL set) takes tokens of bucket NAME for SECONDS from when it
reads a line, and prints for each it got the time it asked with (its now, Unix seconds), one a
line, then `asked FIRST LAST`: the times of its first and last ask.
"""

import dataclasses
import json
import sys
import time
from datetime import UTC, datetime

from flask import Flask

from outbox import create_app, queue, routes, runner
from outbox.cli import configure_logging
from outbox.models import utcnow
from outbox.throttle import keys, taking


def with_domains(app: Flask, domains: dict[str, float]) -> None:
    """Give the app's routes table these per-domain limits (until OUTBOX_ROUTES does it)."""
    with app.app_context():
        table = routes.table()
        app.extensions["outbox.routes"] = dataclasses.replace(table, domains=domains)


def worker(domains: dict[str, float]) -> None:
    app = create_app()
    with_domains(app, domains)
    with app.app_context():
        configure_logging()
    runner.run(app)


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
    if sys.argv[1] == "worker":
        worker(json.loads(sys.argv[2]))
    else:
        hammer(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
