"""How long a message enqueued into an idle outbox waits before it reaches SMTP, run by hand.

    .venv/bin/python bench/latency.py                      # 6 messages, POLL_INTERVAL 5 s
    .venv/bin/python bench/latency.py --poll 20 --messages 4

Starts one `outbox worker` (the scheduler polling every --poll seconds) against an empty
bench database and an SMTP server in this process (aiosmtpd) that notes when each
Message-ID arrives. Then, one at a time, it waits a random part of a poll interval, so
that the worker is idle and the moment falls anywhere in its cycle, stores a message
the way the API does (queue.enqueue) and waits for it at the server. Prints each wait,
the median and the longest, against the goal: within one poll interval.
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from email import message_from_bytes
from pathlib import Path

import dataset
from aiosmtpd.controller import Controller
from flask_migrate import upgrade
from smtpsink import free_port

from outbox import queue
from outbox.core.addresses import Mailbox
from outbox.core.drafts import Draft
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_latency?charset=utf8mb4"


class Arrivals:
    """aiosmtpd handler: the monotonic time each Message-ID arrived at."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.changed = threading.Condition()

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        message_id = message_from_bytes(envelope.content)["Message-ID"]
        with self.changed:
            self.seen[message_id] = time.monotonic()
            self.changed.notify_all()
        return "250 OK"

    def wait_for(self, message_id: str, timeout: float) -> float | None:
        with self.changed:
            self.changed.wait_for(lambda: message_id in self.seen, timeout)
            return self.seen.get(message_id)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (name holds 'bench')")
    parser.add_argument("--poll", type=float, default=5.0, help="worker POLL_INTERVAL, seconds")
    parser.add_argument("--messages", type=int, default=6, help="messages, one at a time")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args()


def main() -> int:
    args = arguments()
    pick = random.Random(args.seed)
    dataset.database(args.url, recreate=True)  # refuses a name without "bench"
    app = dataset.make_app(args.url)
    with app.app_context():
        upgrade()
    arrivals = Arrivals()
    port = free_port()
    server = Controller(arrivals, hostname="127.0.0.1", port=port)
    server.start()
    folder = Path(tempfile.mkdtemp(prefix="outbox-latency-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(
        OUTBOX_DATABASE_URL=args.url, OUTBOX_INSTANCE_PATH=str(folder),
        OUTBOX_MAIL_SERVER="127.0.0.1", OUTBOX_MAIL_PORT=str(port),
        OUTBOX_POLL_INTERVAL=str(args.poll),
    )  # fmt: skip
    log = (folder / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "outbox", "worker"], env=env, stderr=log, stdout=log
    )
    waits = []
    try:
        time.sleep(2.0)  # the first pass runs at start; let it find the queue empty
        for n in range(args.messages):
            time.sleep(pick.uniform(0.1, 1.0) * args.poll)
            draft = Draft(from_addr=Mailbox("bench@example.com"), to=[Mailbox("rcpt@example.com")],
                          text=f"{n}")  # fmt: skip
            with app.app_context():
                message, _ = queue.enqueue(draft, source="bench", max_attempts=3)
                db.session.remove()
            stored = time.monotonic()
            arrived = arrivals.wait_for(message.message_id, timeout=3 * args.poll + 10)
            if arrived is None:
                print(f"message {n}: not received within {3 * args.poll + 10:.0f}s")
                return 1
            waits.append(arrived - stored)
            print(f"message {n}: reached SMTP {waits[-1]:.2f}s after it was stored")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        server.stop()
    longest = max(waits)
    verdict = "PASS" if longest <= args.poll else "FAIL"
    print(
        f"\n{len(waits)} messages, POLL_INTERVAL {args.poll:g}s: median "
        f"{statistics.median(waits):.2f}s, longest {longest:.2f}s; "
        f"goal within one poll interval: {verdict}"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
