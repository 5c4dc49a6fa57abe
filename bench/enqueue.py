"""How fast the API takes mail under gunicorn, one message a request and in batches (by hand).

    .venv/bin/python bench/enqueue.py                      # MariaDB, 20,000 + 200 x 1,000
    .venv/bin/python bench/enqueue.py --requests 2000 --batches 20
    .venv/bin/python bench/enqueue.py --worker-class sync --workers 3

The database named in --url is dropped, created and migrated (its name must contain
"bench"); the app runs under gunicorn; client processes post over keep-alive connections;
then the database must hold exactly the messages that were acknowledged. See bench/README.md.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import dataset
import sqlalchemy as sa
import wrk
from drain import cpu_seconds
from flask_migrate import upgrade

from outbox import tokens
from outbox.extensions import db
from outbox.models import Message

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_enqueue?charset=utf8mb4"
HERE = Path(__file__).resolve().parent
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
LOCAL = {"127.0.0.1", "localhost", "::1"}
TEXT = ("Hello,\n\nyour order has shipped and should reach you within three working days. "
        "You can follow the parcel from your account page at any time.\n\nThank you for "
        "shopping with us.\n-- \nThe shop team, customer service, Monday to Friday\n")  # fmt: skip


def message(n: int) -> dict[str, object]:
    """The n-th message: a typical transactional mail of about 300 bytes of text."""
    return {"from": "Shop <shop@example.com>", "to": f"customer{n}@example.com",
            "subject": f"Your order {n} has shipped", "text": TEXT}  # fmt: skip


@dataclass
class Share:
    """What one client process sends: its request bodies and how many messages each holds."""

    path: str
    bodies: list[bytes]
    per_request: int


@dataclass
class Outcome:
    """What one client process saw."""

    latencies: list[float] = field(default_factory=list)  # seconds, per request
    statuses: Counter[int] = field(default_factory=Counter)
    ids: list[int] = field(default_factory=list)  # acknowledged message ids
    failures: Counter[str] = field(default_factory=Counter)  # connection errors
    cpu: float = 0.0  # seconds of the client processes' own user and system time
    latency_ms: dict[str, float] = field(default_factory=dict)  # wrk's p50, p99 and max


def client(port: int, token: str, share: Share, start: multiprocessing.Event, out) -> None:  # type: ignore[no-untyped-def]
    """Post every body of the share over one keep-alive connection, in turn."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    outcome = Outcome()
    start.wait()
    began_cpu = sum(os.times()[:2])
    for body in share.bodies:
        began = time.perf_counter()
        try:
            conn.request("POST", share.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            outcome.failures[type(exc).__name__] += 1
            conn.close()
            continue
        outcome.latencies.append(time.perf_counter() - began)
        outcome.statuses[response.status] += 1
        if response.status == 201:
            answer = json.loads(data)
            outcome.ids.extend([m["id"] for m in answer["messages"]] if share.per_request > 1
                               else [answer["id"]])  # fmt: skip
    conn.close()
    outcome.cpu = sum(os.times()[:2]) - began_cpu
    out.send(outcome)
    out.close()


def shares(total: int, per_request: int, clients: int, first: int) -> list[Share]:
    """total requests of per_request messages each, dealt out to the clients in turn."""
    path = "/api/messages/batch" if per_request > 1 else "/api/messages"
    found = [Share(path, [], per_request) for _ in range(clients)]
    for r in range(total):
        numbers = range(first + r * per_request, first + (r + 1) * per_request)
        if per_request > 1:
            body = {"messages": [message(n) for n in numbers]}
        else:
            body = message(numbers[0])
        found[r % clients].bodies.append(json.dumps(body).encode())
    return found


@dataclass
class Run:
    name: str
    seconds: float
    requests: int
    messages: int
    outcome: Outcome
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per party


def drive(name: str, port: int, token: str, parts: list[Share], server: list[int],
          database: int | None) -> Run:  # fmt: skip
    """Run one client process per share, started together; gather what they saw.

    server lists the gunicorn processes, whose CPU time is taken with the database's.
    """
    context = multiprocessing.get_context("fork")
    start = context.Event()
    pipes, procs = [], []
    for share in parts:
        mine, theirs = context.Pipe(duplex=False)
        proc = context.Process(target=client, args=(port, token, share, start, theirs))
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    time.sleep(0.5)  # let every client connect its socket code and wait at the start
    before = cpu_now(server, database)
    began = time.perf_counter()
    start.set()
    total = Outcome()
    for pipe in pipes:
        part: Outcome = pipe.recv()
        total.latencies += part.latencies
        total.statuses += part.statuses
        total.ids += part.ids
        total.failures += part.failures
        total.cpu += part.cpu
    seconds = time.perf_counter() - began
    after = cpu_now(server, database)
    for proc in procs:
        proc.join()
    requests = sum(len(s.bodies) for s in parts)
    cpu = {party: after[party] - before[party] for party in after}
    cpu["clients"] = total.cpu
    return Run(name, seconds, requests, requests * parts[0].per_request, total, cpu)


def drive_wrk(name: str, port: int, token: str, parts: list[Share], server: list[int],
              database: int | None, binary: Path) -> Run:  # fmt: skip
    """The same with wrk: a thread and a connection per share, all in one C process."""
    headers = [f"Authorization: Bearer {token}", "Content-Type: application/json"]
    url, path = f"http://127.0.0.1:{port}{parts[0].path}", parts[0].path
    before = cpu_now(server, database)
    seen = wrk.run(binary, url, path, headers, [share.bodies for share in parts])
    after = cpu_now(server, database)
    outcome = Outcome(statuses=seen.statuses, ids=seen.ids, latency_ms=seen.latency_ms)
    if seen.errors:
        outcome.failures["no answer"] = seen.errors
    requests = sum(len(s.bodies) for s in parts)
    cpu = {party: after[party] - before[party] for party in after}
    cpu["clients"] = seen.cpu
    return Run(name, seen.seconds, requests, requests * parts[0].per_request, outcome, cpu)


def cpu_now(server: list[int], database: int | None) -> dict[str, float]:
    """CPU seconds used so far by the gunicorn processes and by the database server.

    The database server's figure counts every client it has, other benchmarks' too.
    """
    found = {"gunicorn": sum(cpu_seconds(pid) for pid in server)}
    if database is not None:
        found["database"] = cpu_seconds(database)
    return found


def database_pid(app) -> int | None:  # type: ignore[no-untyped-def]
    """The process of the MariaDB/MySQL server the app uses, from its pid file, if local.

    Not `pidof`: another server (a test's private one) may be running beside it.
    """
    with app.app_context():
        if db.engine.dialect.name != "mysql" or db.engine.url.host not in LOCAL:
            return None
        path = db.session.scalar(sa.text("SELECT @@pid_file"))
        db.session.remove()
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(url: str, args: argparse.Namespace, instance: str,
          app: str = "outbox:create_app()") -> tuple[subprocess.Popen, int]:  # type: ignore[type-arg]  # fmt: skip
    """Start gunicorn on a free port and wait until it answers."""
    port = free_port()
    env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SECRET_KEY": "bench",
           "OUTBOX_INSTANCE_PATH": instance}  # fmt: skip
    command = [GUNICORN, "--bind", f"127.0.0.1:{port}", "--workers", str(args.workers),
               "--worker-class", args.worker_class, "--threads", str(args.threads),
               "--backlog", "512", app]  # fmt: skip
    if app != "outbox:create_app()":
        command[-1:-1] = ["--pythonpath", str(HERE)]
    server = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/api/openapi.json")
            conn.getresponse().read()  # 401 without a token: it is up all the same
            conn.close()
            return server, port
        except OSError:
            time.sleep(0.2)
    server.kill()
    sys.exit("gunicorn did not answer within 30 s")


def ceiling(args: argparse.Namespace, token: str, binary: Path | None) -> Run:
    """The single-message load against floor_app: gunicorn and Flask, storing nothing."""
    with tempfile.TemporaryDirectory() as instance:
        server, port = serve("", args, instance, app="floor_app:app")
        try:
            processes = [server.pid, *worker_pids(server.pid)]
            parts = shares(args.requests, 1, args.clients, 0)
            if binary is not None:
                return drive_wrk("ceiling", port, token, parts, processes, None, binary)
            return drive("ceiling", port, token, parts, processes, None)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


def worker_pids(master: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{master}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def peak_rss(pids: list[int]) -> list[int]:
    """The peak resident memory (VmHWM) of each process, in KiB."""
    peaks = []
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]))
    return peaks


def report(run: Run) -> None:
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
    server = f"{per['database']:,.0f} us" if "database" in per else "not measured"
    if run.name == "ceiling":
        server = "none"
    print(f"  CPU per request: gunicorn {per['gunicorn']:,.0f} us, database server {server}, "
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="the bench database (dropped first)")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--requests", type=int, default=20_000, help="single-message requests")
    parser.add_argument("--batches", type=int, default=200, help="batch requests")
    parser.add_argument("--batch-size", type=int, default=1000, help="messages per batch")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--worker-class", default="gthread", choices=["sync", "gthread"])
    parser.add_argument("--threads", type=int, default=2, help="threads per gthread worker")
    parser.add_argument("--client", default="wrk", choices=["wrk", "python"],
                        help="load generator: wrk (C), or Python processes")  # fmt: skip
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="skip the ceiling run (gunicorn and Flask only)")  # fmt: skip
    args = parser.parse_args()
    binary = None
    if args.client == "wrk":
        binary, problem = wrk.located()
        if binary is None:
            print(f"{problem}: falling back to --client python, whose CPU time per request "
                  "is several times wrk's (apt-get install wrk to measure with wrk)")  # fmt: skip

    dataset.database(args.url, recreate=True)
    app = dataset.make_app(args.url)
    with app.app_context():
        upgrade()
        token = tokens.create("bench")
        db.session.remove()
        db.engine.dispose()
    setting = f"{args.workers} {args.worker_class} workers"
    if args.worker_class == "gthread":
        setting += f" x {args.threads} threads"
    clients = f"wrk, {args.clients} connections" if binary else f"{args.clients} client processes"
    print(f"gunicorn: {setting}; {clients}; {sa.make_url(args.url)!r}")
    with tempfile.TemporaryDirectory() as instance:
        server, port = serve(args.url, args, instance)
        acknowledged: list[int] = []
        ok = True
        single: Run | None = None
        try:
            pids = worker_pids(server.pid)
            processes, database = [server.pid, *pids], database_pid(app)
            print(f"load average {os.getloadavg()[0]:.2f}")
            plan = [("single", args.requests, 1), ("batch", args.batches, args.batch_size)]
            first = 0
            for name, total, per_request in plan:
                if total == 0:
                    continue
                parts = shares(total, per_request, args.clients, first)
                if binary is not None:
                    run = drive_wrk(name, port, token, parts, processes, database, binary)
                else:
                    run = drive(name, port, token, parts, processes, database)
                first += total * per_request
                report(run)
                acknowledged += run.outcome.ids
                ok = check_stored(app, acknowledged) and ok
                if name == "single":
                    single = run
            peaks = peak_rss(pids)
            print(f"gunicorn workers' peak RSS: {', '.join(f'{p / 1024:.0f}' for p in peaks)} MiB")
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    if args.ceiling and args.requests:
        top = ceiling(args, token, binary)
        report(top)
        rate, most = single.requests / single.seconds, top.requests / top.seconds
        print(f"single requests: {rate:,.0f}/s = {rate / most:.0%} of the ceiling's {most:,.0f}/s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
