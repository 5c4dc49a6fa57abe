"""How long a transactional mail waits while a broadcast backlog drains, run by hand.

    .venv/bin/python bench/streams.py                            # 1,000 broadcast, 4 connections
    .venv/bin/python bench/streams.py --backlog 2000 --wait 0.05 --connections 2

Fills a bench database with --backlog broadcast messages (a mailing's), then drains them
with one worker (Worker().drain() in this process, --connections lanes) into an SMTP
server in this process (aiosmtpd) that answers each mail --wait seconds late, as a relay
25-50 ms away does. Meanwhile it stores a transactional message every --every seconds
the way the API does, and notes when each reaches the server. Prints the wait of each
transactional mail (median, longest) against the goal, within a second, and the rate
the backlog drained at.

On an outbox without streams (an older checkout, PYTHONPATH pointing at it) every
message is the same kind, and the bench shows what a password reset waited before.
"""

import argparse
import asyncio
import dataclasses
import statistics
import sys
import threading
import time
from email import message_from_bytes

import dataset
from aiosmtpd.controller import Controller
from flask_migrate import upgrade
from smtpsink import free_port

from outbox import queue
from outbox.core.addresses import Mailbox
from outbox.core.drafts import Draft
from outbox.models.db import db
from outbox.worker import Worker

try:
    from outbox.core import streams as STREAMS  # noqa: N812
except ImportError:  # an outbox without streams
    STREAMS = None

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_streams?charset=utf8mb4"
GOAL = 1.0  # seconds: a transactional mail starts within a second however full the lanes


class Arrivals:
    """aiosmtpd handler: answers each mail wait seconds late; notes when each Message-ID came."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        message_id = message_from_bytes(envelope.content)["Message-ID"]
        with self.lock:
            self.seen[message_id] = time.monotonic()
        await asyncio.sleep(self.wait)
        return "250 OK"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (dropped and refilled)")
    parser.add_argument("--backlog", type=int, default=1000, help="broadcast messages queued")
    parser.add_argument("--connections", type=int, default=4, help="MAIL_MAX_CONNECTIONS")
    parser.add_argument("--wait", type=float, default=0.03, help="seconds the server takes a mail")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between resets")
    return parser.parse_args()


def a_draft(to: str, text: str, broadcast: bool) -> Draft:
    found = Draft(from_addr=Mailbox("shop@example.com"), to=[Mailbox(to)], text=text)
    if broadcast and STREAMS is not None:
        found = dataclasses.replace(found, stream=STREAMS.Stream.BROADCAST)
    return found


def main() -> int:
    args = arguments()
    arrivals = Arrivals(args.wait)
    port = free_port()
    controller = Controller(arrivals, hostname="127.0.0.1", port=port)
    controller.start()
    dataset.database(args.url, recreate=True)
    app = dataset.make_app(args.url)
    app.config.update(MAIL_SERVER="127.0.0.1", MAIL_PORT=port,
                      MAIL_MAX_CONNECTIONS=args.connections, MAIL_USE_TLS=False)  # fmt: skip
    sent: dict[str, float] = {}
    try:
        with app.app_context():
            upgrade()
            drafts = [a_draft(f"r{n}@example.com", "news", True) for n in range(args.backlog)]
            for start in range(0, len(drafts), 1000):
                queue.enqueue_batch(drafts[start : start + 1000], source="bench", max_attempts=3)
            draining = threading.Event()

            def post() -> None:
                with app.app_context():
                    draining.wait()
                    while draining.is_set():
                        message, _ = queue.enqueue(a_draft("ann@example.com", "reset", False),
                                                   source="bench", max_attempts=3)  # fmt: skip
                        sent[message.message_id] = time.monotonic()
                        time.sleep(args.every)
                    db.session.remove()

            poster = threading.Thread(target=post, daemon=True)
            poster.start()
            began = time.monotonic()
            draining.set()
            tally = Worker().drain()
            took = time.monotonic() - began
            draining.clear()
            poster.join()
            Worker().drain()  # the resets stored after the pass ended
    finally:
        controller.stop()
    waits = sorted(arrivals.seen[m] - at for m, at in sent.items() if m in arrivals.seen)
    print(f"backlog {args.backlog:,} broadcast, {args.connections} connections, server "
          f"{1000 * args.wait:.0f} ms a mail: drained {tally.sent:,} in {took:.1f} s "
          f"({tally.sent / took:,.0f}/s)")  # fmt: skip
    if not waits:
        print("no transactional mail was stored during the drain")
        return 1
    late = sum(1 for w in waits if w > GOAL)
    print(
        f"transactional mails: {len(waits)}; wait to the server median "
        f"{statistics.median(waits):.2f} s, longest {waits[-1]:.2f} s; over {GOAL:g} s: {late}"
    )
    print("PASS" if not late else "FAIL")
    return 0 if not late else 1


if __name__ == "__main__":
    sys.exit(main())
