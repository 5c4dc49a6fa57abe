"""How fast the retention purge removes old settled messages, and how much it slows a drain.

    .venv/bin/python bench/purge.py --old 1000000 --queued 20000
    .venv/bin/python bench/purge.py --old 200000 --queued 10000   # when time is short
    .venv/bin/python bench/purge.py --old 1000000 --queued 40000 --pace 9 --rounds 5

Fills the bench database with --old messages settled 200 days ago (each tried one with
its attempt) and --queued due messages, then drains the queue three times with
--processes `outbox send-queued` processes into smtp-sink: alone, while
`retention.purge(days=90, pace=--pace)` runs in this process, and alone again. Prints the drain's
messages/s each time, the slowdown while purging, the purge's messages/s and the load
average. With --rounds N it drains 2N times instead, alone and beside the purge by turns
(the purge waits while a drain is alone), and compares the medians. See bench/README.md.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dataset
import drain
import smtpsink
import sqlalchemy as sa
from flask import Flask
from flask_migrate import upgrade

from outbox.capabilities import retention
from outbox.core.status import Status
from outbox.models import Message, utcnow
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_purge?charset=utf8mb4"
AGE = timedelta(days=200)  # how long ago the old messages settled
IN_FLIGHT = {Status.QUEUED.value, Status.DEFERRED.value, Status.SENDING.value}
CHECKOUT = Path(__file__).resolve().parent.parent


def fill_old(count: int) -> None:
    """count messages settled AGE ago, with their attempts, by multi-row INSERTs."""
    began = time.perf_counter()
    for messages, attempts in dataset.chunks(count, utcnow() - AGE):
        for row in messages:
            if row["status"] in IN_FLIGHT:  # all settled: the rest were cancelled
                row.update(status=Status.CANCELLED.value, locked_by=None, locked_at=None)
            row["settled_at"] = row["last_retry"] or row["created_at"]
        db.session.execute(sa.insert(drain.MESSAGES), messages)
        if attempts:
            db.session.execute(sa.insert(dataset.ATTEMPTS), attempts)
        db.session.commit()
    took = time.perf_counter() - began
    print(f"filled {count:,} old settled messages in {took:.0f} s", flush=True)


def fill_queued(count: int) -> None:
    """count due messages with ids after every message there."""
    top = db.session.scalar(sa.select(sa.func.max(Message.id))) or 0
    for rows in drain.queued_rows(count, seed=int(top) % 1000):
        for row in rows:
            row["id"] += top
            row.update(message_id=f"<q{row['id']}@bench.example.com>", idempotency_key=None,
                       request_hash=None)  # fmt: skip
        db.session.execute(sa.insert(drain.MESSAGES), rows)
        db.session.commit()
    if db.engine.dialect.name == "postgresql":
        db.session.execute(sa.text("SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                                   "(SELECT max(id) FROM messages))"))  # fmt: skip
        db.session.commit()


def timed_drain(app: Flask, count: int, processes: int, env: dict, folder: Path) -> float:
    """Queue count messages, drain them; the drain's messages/s."""
    with app.app_context():
        fill_queued(count)
        db.engine.dispose()
    took, runs = drain.drain(processes, env, folder, None)
    bad = [drain.last_line(run.stderr) for run in runs if run.code]
    if bad:
        sys.exit(f"a worker failed: {bad}")
    return count / took


def purge_in_thread(app: Flask, result: dict[str, Any], pace: float) -> threading.Thread:
    def run() -> None:
        with app.app_context():
            began = time.perf_counter()
            try:
                result["done"] = retention.purge(days=90, pace=pace)
            except Stopped:
                db.session.rollback()
            result["seconds"] = time.perf_counter() - began
            db.session.remove()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


class Gate:
    """retention's clock, with a gate: while it is shut the purge waits after its batch.

    Lets one run alternate drains alone and drains beside the purge (--rounds), so that
    both kinds meet the same machine load; the purge must rest between batches (--pace).
    """

    def __init__(self) -> None:
        self.open = threading.Event()
        self.stopped = False
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.open.wait()
        if self.stopped:
            raise Stopped


class Stopped(Exception):
    """The bench has its figures: the purge ends where it is."""


def messages(app: Flask) -> int:
    with app.app_context():
        found = db.session.scalar(sa.select(sa.func.count()).select_from(Message))
        db.session.remove()
        return int(found or 0)


def rounds(app: Flask, args: argparse.Namespace, env: dict, folder: Path) -> int:
    """Drains alone and beside the gated purge, by turns; the medians of each."""
    gate = Gate()
    retention.time = gate  # type: ignore[attr-defined]  # the bench's hook, nothing else's
    result: dict[str, Any] = {}
    before = messages(app)
    thread = purge_in_thread(app, result, args.pace)
    alone, during, open_for = [], [], 0.0
    for n in range(args.rounds):
        alone.append(timed_drain(app, args.queued, args.processes, env, folder))
        opened = time.perf_counter()
        gate.open.set()
        time.sleep(1)  # the purge is under way again
        during.append(timed_drain(app, args.queued, args.processes, env, folder))
        still = thread.is_alive()
        gate.open.clear()
        open_for += time.perf_counter() - opened
        print(f"round {n + 1}: alone {alone[-1]:,.0f}, beside the purge {during[-1]:,.0f} "
              f"messages/s (purge still running: {still}); load {os.getloadavg()[0]:.1f}",
              flush=True)  # fmt: skip
        if not still:
            break
    gate.stopped = True
    gate.open.set()
    thread.join()
    removed = before + args.queued * len(alone + during) - messages(app)
    middle_alone, middle_during = statistics.median(alone), statistics.median(during)
    print(f"medians: alone {middle_alone:,.0f}, beside the purge {middle_during:,.0f} "
          f"messages/s: the drain ran {1 - middle_during / middle_alone:.1%} slower "
          f"(goal: under 10%)")  # fmt: skip
    print(
        f"purge: {removed:,} messages removed in {open_for:.0f} s beside the drains: "
        f"{removed / open_for:,.0f} messages/s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (dropped and refilled)")
    parser.add_argument("--old", type=int, default=1_000_000, help="old settled messages")
    parser.add_argument("--queued", type=int, default=20_000, help="messages per drain")
    parser.add_argument("--processes", type=int, default=2, help="send-queued processes")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="rest this many times a batch's time after it (the workers: "
                        f"{retention.WORKER_PACE:g}; outbox purge: 0)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=0,
                        help="alternate this many drains alone and beside the purge, which "
                        "waits while the drain is alone (needs --pace); 0: one of each, "
                        "the purge to its end")  # fmt: skip
    args = parser.parse_args(argv)
    if args.rounds and not args.pace:
        parser.error("--rounds needs --pace: the purge waits only where it rests")
    dataset.database(args.url, recreate=True)  # refuses a name without "bench"
    app = dataset.make_app(args.url)
    with app.app_context():
        upgrade()
        fill_old(args.old)
        db.engine.dispose()
    print(f"load average before: {os.getloadavg()}", flush=True)
    with drain.exclusive(args.url), smtpsink.Sink(record=False) as sink, \
            tempfile.TemporaryDirectory() as tmp:  # fmt: skip
        folder = Path(tmp)
        env = drain.worker_env(args.url, "127.0.0.1", sink.port, folder, {})
        env["PYTHONPATH"] = str(CHECKOUT)
        timed_drain(app, args.queued // 10, args.processes, env, folder)  # warm up, not counted
        if args.rounds:
            return rounds(app, args, env, folder)
        alone = timed_drain(app, args.queued, args.processes, env, folder)
        print(f"drain alone: {alone:,.0f} messages/s", flush=True)
        result: dict[str, Any] = {}
        thread = purge_in_thread(app, result, args.pace)
        time.sleep(2)  # the purge is under way
        during = timed_drain(app, args.queued, args.processes, env, folder)
        load = os.getloadavg()
        still = thread.is_alive()
        print(f"drain while purging: {during:,.0f} messages/s (purge still running at its "
              f"end: {still}); load average {load}", flush=True)  # fmt: skip
        thread.join()
        after = timed_drain(app, args.queued, args.processes, env, folder)
        print(f"drain alone again: {after:,.0f} messages/s", flush=True)
    done, seconds = result["done"], result["seconds"]
    slowdown = 1 - during / ((alone + after) / 2)
    print(f"purge: {done} in {seconds:.0f} s: {done.messages / seconds:,.0f} messages/s")
    print(f"the drain ran {slowdown:.1%} slower while purging (goal: under 10%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
