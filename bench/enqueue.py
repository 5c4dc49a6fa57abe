"""How fast the API takes mail under gunicorn or granian, one message a request and in
batches, beside the ceiling of the same server with a view that stores nothing (by hand).

    .venv/bin/python bench/enqueue.py                      # MariaDB, 20,000 + 200 x 1,000
    .venv/bin/python bench/enqueue.py --requests 5000 --batches 0 --rounds 3 --server both
    .venv/bin/python bench/enqueue.py --worker-class sync --workers 3

The database named in --url is dropped, created and migrated (its name must contain
"bench"); each round starts the server on outbox, then on bench/floor_app.py; wrk (or
client processes) posts over keep-alive connections; then the database must hold exactly
the messages that were acknowledged. See bench/README.md.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import dataset
import servers
import sqlalchemy as sa
import wrk
from flask_migrate import upgrade
from loadgen import Run, Share, drive, drive_wrk

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_enqueue?charset=utf8mb4"
TEXT = ("Hello,\n\nyour order has shipped and should reach you within three working days. "
        "You can follow the parcel from your account page at any time.\n\nThank you for "
        "shopping with us.\n-- \nThe shop team, customer service, Monday to Friday\n")  # fmt: skip


def message(n: int) -> dict[str, object]:
    """The n-th message: a typical transactional mail of about 300 bytes of text."""
    return {"from": "Shop <shop@example.com>", "to": f"customer{n}@example.com",
            "subject": f"Your order {n} has shipped", "text": TEXT}  # fmt: skip


def shares(total: int, per_request: int, clients: int, first: int) -> list[Share]:
    """total requests of per_request messages each, dealt out to the clients in turn.

    Never more clients than requests: a wrk thread without a body would post an empty one.
    """
    path = "/api/messages/batch" if per_request > 1 else "/api/messages"
    clients = max(1, min(clients, total))
    found = [Share(path, [], per_request) for _ in range(clients)]
    for r in range(total):
        numbers = range(first + r * per_request, first + (r + 1) * per_request)
        if per_request > 1:
            body = {"messages": [message(n) for n in numbers]}
        else:
            body = message(numbers[0])
        found[r % clients].bodies.append(json.dumps(body).encode())
    return found


def peak_rss(pids: list[int]) -> list[int]:
    """The peak resident memory (VmHWM) of each process, in KiB."""
    peaks = []
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]))
    return peaks


def report(run: Run, server: str) -> None:
    out = run.outcome
    ms = sorted(x * 1000 for x in out.latencies) or [0.0]
    latency = out.latency_ms or {"p50": statistics.median(ms), "max": ms[-1],
                                 "p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))]}  # fmt: skip
    statuses = ", ".join(f"{code}: {n}" for code, n in sorted(out.statuses.items()))
    failures = ", ".join(f"{k}: {n}" for k, n in out.failures.items()) or "none"
    print(f"{run.name}: {run.requests} requests, {run.messages} messages in {run.seconds:.2f} s")
    print(f"  {run.requests / run.seconds:,.0f} requests/s, {run.messages / run.seconds:,.0f} "
          f"messages/s acknowledged {len(out.ids):,}")  # fmt: skip
    print(f"  latency p50 {latency['p50']:.1f} ms, p99 {latency['p99']:.1f} ms, "
          f"max {latency['max']:.1f} ms")  # fmt: skip
    print(f"  answers {statuses}; connection failures {failures}")
    cpu = run.cpu
    per = {party: 1e6 * seconds / run.requests for party, seconds in cpu.items()}
    total = sum(cpu.values())
    cores = os.cpu_count() or 1
    database = f"{per['database']:,.0f} us" if "database" in per else "not measured"
    if run.name.startswith("ceiling"):
        database = "none"
    print(f"  CPU per request: {server} {per['server']:,.0f} us, database server {database}, "
          f"clients {per['clients']:,.0f} us; all "
          f"{1e6 * total / run.requests:,.0f} us = at most "
          f"{cores * run.requests / total:,.0f} requests/s on {cores} cores")  # fmt: skip


def check_stored(app, acknowledged: list[int]) -> bool:  # type: ignore[no-untyped-def]
    """Whether the database holds exactly the acknowledged messages, each once."""
    with app.app_context():
        stored = set(db.session.scalars(sa.select(Message.id)))
        db.session.remove()
    wanted = set(acknowledged)
    ok = stored == wanted and len(wanted) == len(acknowledged)
    print(f"  stored {len(stored):,} messages; acknowledged {len(acknowledged):,} "
          f"({len(wanted):,} distinct): {'exactly those' if ok else 'MISMATCH'}")  # fmt: skip
    if not ok:
        print(f"  stored but not acknowledged: {len(stored - wanted)}; "
              f"acknowledged but not stored: {len(wanted - stored)}")  # fmt: skip
    return ok


def load_average() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


class Bench:
    """One run's database, token, load generator and what the outbox runs acknowledged."""

    def __init__(self, args: argparse.Namespace, binary: Path | None) -> None:
        self.args, self.binary = args, binary
        dataset.database(args.url, recreate=True)
        self.app = dataset.make_app(args.url)
        with self.app.app_context():
            upgrade()
            self.token = tokens.create("bench")
            db.session.remove()
            db.engine.dispose()
        self.database = dataset.server_pid(str(self.app.config["DATABASE_URL"]))
        self.acknowledged: list[int] = []
        self.numbered = 0  # messages made so far: each request's get numbers of their own
        self.ok = True

    def drive(self, name: str, served: servers.Served, total: int, per_request: int,
              database: int | None) -> Run:  # fmt: skip
        parts = shares(total, per_request, self.args.clients, self.numbered)
        self.numbered += total * per_request
        port, token = served.port, self.token
        if self.binary is not None:
            return drive_wrk(name, port, token, parts, served.pids, database, self.binary)
        return drive(name, port, token, parts, served.pids, database)

    def outbox(self, setting: servers.Setting, plan: list[tuple[str, int, int]]) -> list[Run]:
        """The plan's loads (name, requests, messages each) against outbox, each checked."""
        runs = []
        with tempfile.TemporaryDirectory() as instance:
            env = {"OUTBOX_DATABASE_URL": self.args.url, "OUTBOX_SECRET_KEY": "bench",
                   "OUTBOX_INSTANCE_PATH": instance}  # fmt: skip
            with servers.served(setting, servers.OUTBOX, env) as served:
                if self.args.warmup:
                    warm = self.drive("warm-up", served, self.args.warmup, 1, None)
                    self.acknowledged += warm.outcome.ids
                for name, total, per_request in plan:
                    run = self.drive(name, served, total, per_request, self.database)
                    report(run, setting.server)
                    self.acknowledged += run.outcome.ids
                    self.ok = check_stored(self.app, self.acknowledged) and self.ok
                    runs.append(run)
                peaks = peak_rss(served.workers)
                print(f"  {setting.server} workers' peak RSS: "
                      f"{', '.join(f'{p / 1024:.0f}' for p in peaks)} MiB")  # fmt: skip
        return runs

    def ceiling(self, setting: servers.Setting) -> Run:
        """The single-message load against floor_app under the same server: nothing stored."""
        with tempfile.TemporaryDirectory() as instance:
            with servers.served(setting, servers.FLOOR, {"OUTBOX_INSTANCE_PATH": instance}) as s:
                if self.args.warmup:
                    self.drive("warm-up", s, self.args.warmup, 1, None)
                run = self.drive("ceiling", s, self.args.requests, 1, None)
        report(run, setting.server)
        return run


def rate(run: Run) -> float:
    return run.requests / run.seconds


def summary(setting: servers.Setting, singles: list[Run], ceilings: list[Run]) -> None:
    """Each round's single-message rate beside its ceiling, and the medians."""
    print(f"{setting.describe()}")
    for n, single in enumerate(singles):
        line = f"  round {n + 1}: {rate(single):,.0f} requests/s"
        if n < len(ceilings):
            top = rate(ceilings[n])
            line += f", ceiling {top:,.0f}/s: {rate(single) / top:.0%}"
        print(line)
    mid = statistics.median(rate(r) for r in singles)
    line = f"  median of {len(singles)}: {mid:,.0f} requests/s"
    if ceilings:
        top = statistics.median(rate(r) for r in ceilings)
        pairs = zip(singles, ceilings, strict=False)
        ratios = statistics.median(rate(a) / rate(b) for a, b in pairs)
        line += (f" = {mid / top:.0%} of the ceiling's {top:,.0f}/s "
                 f"(median of the rounds' ratios {ratios:.0%})")  # fmt: skip
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="the bench database (dropped first)")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--requests", type=int, default=20_000, help="single-message requests")
    parser.add_argument("--batches", type=int, default=200, help="batch requests")
    parser.add_argument("--batch-size", type=int, default=1000, help="messages per batch")
    parser.add_argument("--server", default="gunicorn", choices=[*servers.SERVERS, "both"],
                        help="the HTTP server; both: each in turn in every round")  # fmt: skip
    parser.add_argument("--workers", type=int, default=4, help="server processes")
    parser.add_argument("--worker-class", default="gthread", choices=["sync", "gthread"])
    parser.add_argument("--threads", type=int, default=2, help="threads per gthread worker")
    parser.add_argument("--rounds", type=int, default=1,
                        help="single-message runs a server, each beside its ceiling")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=200,
                        help="untimed requests to each server started, first")  # fmt: skip
    parser.add_argument("--client", default="wrk", choices=["wrk", "python"],
                        help="load generator: wrk (C), or Python processes")  # fmt: skip
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="skip the ceiling runs (the server and Flask only)")  # fmt: skip
    args = parser.parse_args()
    binary = None
    if args.client == "wrk":
        binary, problem = wrk.located()
        if binary is None:
            print(f"{problem}: falling back to --client python, whose CPU time per request "
                  "is several times wrk's (apt-get install wrk to measure with wrk)")  # fmt: skip

    names = servers.SERVERS if args.server == "both" else (args.server,)
    settings = [servers.Setting(name, args.workers, args.worker_class, args.threads)
                for name in names]  # fmt: skip
    bench = Bench(args, binary)
    clients = f"wrk, {args.clients} connections" if binary else f"{args.clients} client processes"
    print(f"{'; '.join(s.describe() for s in settings)}; {clients}; {sa.make_url(args.url)!r}")
    print(f"{load_average()} at the start")
    singles: dict[servers.Setting, list[Run]] = {s: [] for s in settings}
    ceilings: dict[servers.Setting, list[Run]] = {s: [] for s in settings}
    for n in range(args.rounds if args.requests else 0):
        for setting in settings:
            print(f"--- round {n + 1}, {setting.describe()}; {load_average()}")
            singles[setting] += bench.outbox(setting, [("single", args.requests, 1)])
            if args.ceiling:
                ceilings[setting].append(bench.ceiling(setting))
    if args.batches:
        print(f"--- batches, {settings[0].describe()}; {load_average()}")
        bench.outbox(settings[0], [("batch", args.batches, args.batch_size)])
    print(f"--- single messages, one line a round; {load_average()} at the end")
    for setting in settings:
        if singles[setting]:
            summary(setting, singles[setting], ceilings[setting])
    sys.exit(0 if bench.ok else 1)


if __name__ == "__main__":
    main()
