"""How long a message stored into outbox waits before SMTP's 250: idle, beside a mailing that
drains, or over a slow link; run by hand.

    .venv/bin/python bench/latency.py                           # MariaDB, 200 samples
    .venv/bin/python bench/latency.py --url postgresql+psycopg://postgres@127.0.0.1/outbox_bench_latency
    .venv/bin/python bench/latency.py --url sqlite:////tmp/outbox_bench_latency.sqlite3
    .venv/bin/python bench/latency.py --wake-ups off --poll 5 --samples 20
    .venv/bin/python bench/latency.py --samples 0 --cost-workers 8 --cost-seconds 60
    .venv/bin/python bench/latency.py --samples 0 --cost-workers 8 --cost-hosts 3  # as root
    .venv/bin/python bench/latency.py --case mailing --recipients 20000
    .venv/bin/python bench/latency.py --case slowlink --samples 100

Against an empty bench database (`--url`, dropped and recreated) and an SMTP server in
this process (aiosmtpd) that notes when each Message-ID's DATA arrives:

1. the floor: `--floor` mails sent with bare smtplib, one connection each, from the
   moment the client starts to the arrival;
2. latency: one `outbox worker` with the default settings (but `--poll`,
   `--wake-ups`); one message at a time, after a random pause (`--gap`, so the worker is
   idle and the moment falls anywhere in its cycles), stores a message as the API does
   (`queue.enqueue`: the single INSERT that commits itself) and waits for it at the
   server; queue-to-250 is from the call to store it to its arrival. p50, p95, p99 and
   max against the goals (p50 < 50 ms, p99 < 250 ms);
3. the database's cost of idle workers (`--cost-workers`, `--cost-seconds`): the
   server's CPU (MariaDB: the mysqld process named by @@pid_file; PostgreSQL: the
   postmaster of `data_directory` and its children) over the window, with wake-ups
   on and then off. Not for SQLite (no server). With `--cost-hosts N` the workers are
   spread over N network namespaces (tests.support.hosts: a bridge, a veth pair each)
   and reach the database through a relay on the bridge, as workers on other machines
   would: each probe then crosses a network stack, and the relay's CPU is this
   process's, counted in neither figure.

`--case mailing` replaces 2. with: --recipients broadcast messages (a mailing's rows, stored
through the queue's insert path as bench/drain.py fills it, not one by one) drain with
--processes workers, first alone, then again (refilled) while a transactional message is
stored as the API does every --every seconds. It reports queue-to-250 of the
transactional ones and both drain rates (first to last broadcast arrival), against the
goals: p99 < 1 s, the drain rate within 10% of its rate alone.

`--case slowlink` runs 1. and 2. with the SMTP server behind a link of --delay seconds each
way (bench/slowlink.py's delay line: a proxy process that holds every byte, both ways);
goal p99 < 1 s.
"""

import argparse
import os
import random
import smtplib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path

import dataset
import drain
import slowlink
import sqlalchemy as sa
from aiosmtpd.controller import Controller
from flask_migrate import upgrade
from smtpsink import free_port

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # for tests.support.hosts
from outbox import queue
from outbox.core.addresses import Mailbox
from outbox.core.drafts import Draft
from outbox.models import WorkerBeat
from outbox.models.db import db
from outbox.queue import wakeups
from tests.support import hosts  # noqa: E402

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_latency?charset=utf8mb4"
GOALS = {"p50": 0.050, "p99": 0.250}  # seconds
LOADED_GOALS = {"p99": 1.0}  # seconds: beside a mailing, over a slow link
BUYER = "buyer@transactional.example"  # the transactional messages' recipient
DRAIN_KEPT = 0.90  # a mailing's drain rate with transactional traffic, of its rate alone
TICK = os.sysconf("SC_CLK_TCK")


class Arrivals:
    """aiosmtpd handler: the monotonic time each Message-ID arrived at."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.others = 0  # mails to anyone but BUYER: a mailing's
        self.changed = threading.Condition()

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        arrived = time.monotonic()
        head = envelope.content.split(b"\r\n\r\n", 1)[0].decode("ascii", "replace")
        message_id = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                          if line.lower().startswith("message-id:"))  # fmt: skip
        with self.changed:
            self.seen[message_id] = arrived
            self.others += BUYER not in envelope.rcpt_tos
            self.changed.notify_all()
        return "250 OK"

    def wait_for(self, message_id: str, timeout: float) -> float | None:
        with self.changed:
            self.changed.wait_for(lambda: message_id in self.seen, timeout)
            return self.seen.get(message_id)

    def wait_others(self, count: int, timeout: float) -> bool:
        """Until count mails to others than BUYER have arrived; whether within timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: self.others >= count, timeout)

    def forget(self) -> None:
        with self.changed:
            self.seen.clear()
            self.others = 0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (name holds 'bench')")
    parser.add_argument("--samples", type=int, default=200, help="messages, one at a time")
    parser.add_argument("--gap", type=float, default=0.5, help="longest pause between, seconds")
    parser.add_argument("--poll", type=float, default=None, help="POLL_INTERVAL (default 20)")
    parser.add_argument("--wake-ups", choices=("on", "off"), default="on")
    parser.add_argument(
        "--wake-interval", type=float, default=None, help="WAKE_INTERVAL (default 0.05)"
    )
    parser.add_argument("--floor", type=int, default=50, help="bare smtplib mails")
    parser.add_argument("--cost-workers", type=int, default=0, help="idle workers to weigh")
    parser.add_argument("--cost-seconds", type=float, default=60.0)
    parser.add_argument(
        "--cost-hosts", type=int, default=0, help="spread the idle workers over network hosts"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--case",
        choices=("idle", "mailing", "slowlink"),
        default="idle",
        help="what the single messages meet: nothing, a mailing, a slow link",
    )
    parser.add_argument("--recipients", type=int, default=100_000, help="the mailing's rows")
    parser.add_argument("--processes", type=int, default=2, help="workers draining the mailing")
    parser.add_argument(
        "--every",
        type=float,
        default=0.1,
        help="seconds between transactional messages beside the mailing",
    )
    parser.add_argument("--delay", type=float, default=0.025, help="the slow link, each way")
    return parser.parse_args()


def quantiles(waits: list[float]) -> dict[str, float]:
    ordered = sorted(waits)
    cut = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else []
    return {"p50": statistics.median(ordered), "p95": cut[94] if cut else ordered[0],
            "p99": cut[98] if cut else ordered[0], "max": ordered[-1]}  # fmt: skip


def shown(waits: list[float]) -> str:
    return ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in quantiles(waits).items())


def floor(arrivals: Arrivals, port: int, count: int) -> list[float]:
    """Bare smtplib, a connection per mail: start of the client to arrival."""
    waits = []
    for n in range(count):
        mail = EmailMessage()
        mail["From"], mail["To"], mail["Subject"] = "bench@example.com", "rcpt@example.com", "f"
        mail["Message-ID"] = make_msgid(domain="floor.example")
        mail.set_content(f"{n}")
        started = time.monotonic()
        with smtplib.SMTP("127.0.0.1", port) as client:
            client.send_message(mail)
        arrived = arrivals.wait_for(mail["Message-ID"], timeout=10)
        assert arrived is not None
        waits.append(arrived - started)
    return waits


def start_workers(
    count: int, env: dict[str, str], folder: Path, net: hosts.Network | None = None
) -> list[subprocess.Popen]:  # type: ignore[type-arg]
    """count `outbox worker` processes; with net, dealt round the network's hosts."""
    log = (folder / "workers.log").open("a")
    command = [sys.executable, "-m", "outbox", "worker"]
    names = list(net.hosts) if net else []
    return [
        subprocess.Popen(
            net.command(names[n % len(names)], *command) if net else command,
            env=env,
            stderr=log,
            stdout=log,
        )
        for n in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen]) -> None:  # type: ignore[type-arg]
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(timeout=60)


def wait_beating(app, count: int) -> None:  # type: ignore[no-untyped-def]
    """Until count workers have started their first pass (each beats as it starts)."""
    deadline = time.monotonic() + 180
    with app.app_context():
        while True:
            beating = db.session.execute(sa.select(sa.func.count(WorkerBeat.worker_id))).scalar()
            db.session.commit()
            if beating == count:
                return
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start")
            time.sleep(0.1)


def server_pids(app) -> list[int]:  # type: ignore[no-untyped-def]
    """The processes of the database server the URL names (MariaDB's one; PostgreSQL's all)."""
    with app.app_context():
        if db.engine.dialect.name == "postgresql":
            folder = db.session.execute(sa.text("SHOW data_directory")).scalar()
            main = int(Path(folder, "postmaster.pid").read_text().split()[0])
        else:
            pid_file = db.session.execute(sa.text("SELECT @@pid_file")).scalar()
            main = int(Path(pid_file).read_text().split()[0])
        db.session.remove()
    pids = [main]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == main:
                pids.append(int(entry.name))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """CPU of the server: the main process (all threads) and its children now alive."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def probe_cost(app, count: int = 5000) -> float:  # type: ignore[no-untyped-def]
    """The server's CPU seconds for one probe of an idle worker (wakeups.Probe), from
    count of them in a row: other users of a shared server weigh little against them."""
    pids = server_pids(app)
    with app.app_context():
        probe = wakeups.Probe(db.engine)
        probe.newest()  # connected
        before = cpu_seconds(pids)
        for _ in range(count):
            probe.newest()
        used = cpu_seconds(pids) - before
        probe.close()
    return used / count


def idle_cost(  # type: ignore[no-untyped-def]
    app, env: dict[str, str], folder: Path, count: int, seconds: float, spread: int = 0
) -> None:
    """The server's CPU over seconds while count idle workers wait, wake-ups on and off;
    on a server others use too, the difference is noise: the probes' own cost after it.
    spread: over that many network hosts, through a relay to the database."""
    if not spread:
        idle_workers(app, env, folder, count, seconds)
        return
    reason = hosts.refused()
    if reason is not None:
        sys.exit(f"--cost-hosts: {reason}")
    url = sa.make_url(env["OUTBOX_DATABASE_URL"])
    default_port = 5432 if url.get_backend_name() == "postgresql" else 3306
    database = (url.host or "127.0.0.1", url.port or default_port)
    with hosts.network(spread) as net, hosts.Relay(net.gateway, database) as relay:
        seen = url.set(host=net.gateway, port=relay.port).render_as_string(hide_password=False)
        idle_workers(app, {**env, "OUTBOX_DATABASE_URL": seen}, folder, count, seconds, net)
        print(f"  over {spread} hosts: database connections by host address "
              f"{dict(sorted(relay.peers.items()))}")  # fmt: skip


def idle_workers(  # type: ignore[no-untyped-def]
    app,
    env: dict[str, str],
    folder: Path,
    count: int,
    seconds: float,
    net: hosts.Network | None = None,
) -> None:
    """The server's CPU while count workers (on net's hosts) idle, wake-ups on then off."""
    where = f" on {len(net.hosts)} hosts" if net else ""
    for wake_ups in ("on", "off"):
        workers = start_workers(count, {**env, "OUTBOX_WAKE_UPS": wake_ups}, folder, net)
        try:
            wait_beating(app, count)
            time.sleep(2.0)  # past the first passes
            pids, mine = server_pids(app), [w.pid for w in workers]
            before, started = cpu_seconds(pids), time.monotonic()
            theirs = cpu_seconds(mine)
            time.sleep(seconds)
            used = cpu_seconds(server_pids(app)) - before
            theirs = cpu_seconds(mine) - theirs
            elapsed = time.monotonic() - started
        finally:
            stop_workers(workers)
        with app.app_context():
            db.session.execute(sa.delete(WorkerBeat))
            db.session.commit()
            db.session.remove()
        print(f"idle cost, {count} workers{where}, wake-ups {wake_ups}: server CPU {used:.2f} s "
              f"in {elapsed:.0f} s = {100 * used / elapsed:.2f}% of a core; the workers' own "
              f"{100 * theirs / elapsed:.2f}%")  # fmt: skip
    if sa.make_url(env["OUTBOX_DATABASE_URL"]).get_backend_name() != "postgresql":  # it listens
        interval = float(env.get("OUTBOX_WAKE_INTERVAL", app.config["WAKE_INTERVAL"]))
        each = probe_cost(app)
        print(
            f"one probe: {each * 1e6:.0f} us of server CPU; {count} idle workers probing "
            f"every {interval:g} s: {100 * each * count / interval:.2f}% of a core"
        )


def main() -> int:
    args = arguments()
    pick = random.Random(args.seed)
    url = sa.make_url(args.url)
    if url.get_backend_name() == "sqlite":
        if "bench" not in (url.database or ""):
            sys.exit("refusing to use a SQLite file whose name does not contain 'bench'")
        Path(url.database or "").unlink(missing_ok=True)
    else:
        dataset.database(args.url, recreate=True)  # refuses a name without "bench"
    app = dataset.make_app(args.url)
    with app.app_context():
        upgrade()
        db.engine.dispose()  # a mailing's run drops the database
    arrivals = Arrivals()
    port = sink_port = free_port()
    line = None
    if args.case == "slowlink":  # the line forks: before this process has threads
        line, port = slowlink.delay_line(("127.0.0.1", sink_port), args.delay)
        print(f"link: a delay line, {args.delay * 1000:g} ms each way")
    server = Controller(arrivals, hostname="127.0.0.1", port=sink_port)
    server.start()
    folder = Path(tempfile.mkdtemp(prefix="outbox-latency-"))
    app.instance_path = str(folder)  # the workers' too: this process rings their doorbells
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(
        OUTBOX_DATABASE_URL=args.url, OUTBOX_INSTANCE_PATH=str(folder),
        OUTBOX_MAIL_SERVER="127.0.0.1", OUTBOX_MAIL_PORT=str(port),
        OUTBOX_WAKE_UPS=args.wake_ups,
    )  # fmt: skip
    if args.poll is not None:
        env["OUTBOX_POLL_INTERVAL"] = str(args.poll)
    if args.wake_interval is not None:
        env["OUTBOX_WAKE_INTERVAL"] = str(args.wake_interval)
    app.config["WAKE_UPS"] = args.wake_ups == "on"
    failed = False
    try:
        if args.floor:
            waits = floor(arrivals, port, args.floor)
            print(f"floor, bare smtplib, {args.floor} mails: {shown(waits)}")
        if args.case == "mailing":
            arrivals.forget()
            failed = not beside_mailing(args, arrivals, env, folder)
        elif args.samples:
            failed = not latency(args, app, arrivals, env, folder, pick)
        if args.cost_workers:
            if url.get_backend_name() == "sqlite":
                print("idle cost: SQLite has no server to weigh")
            else:
                idle_cost(app, env, folder, args.cost_workers, args.cost_seconds,
                          args.cost_hosts)  # fmt: skip
    finally:
        server.stop()
        if line is not None:
            line.kill()
    return 1 if failed else 0


def latency(args, app, arrivals, env, folder, pick) -> bool:  # type: ignore[no-untyped-def]
    """Queue-to-250 of args.samples messages, one at a time; whether the goals were met."""
    workers = start_workers(1, env, folder)
    waits = []
    limit = 3 * (args.poll or 20.0) + 10
    try:
        wait_beating(app, 1)
        time.sleep(1.0)  # past the first pass
        for n in range(args.samples):
            time.sleep(pick.uniform(0.05, args.gap))
            draft = Draft(from_addr=Mailbox("bench@example.com"), to=[Mailbox("rcpt@example.com")],
                          text=f"{n}")  # fmt: skip
            with app.app_context():
                queued = time.monotonic()
                message, _ = queue.enqueue(draft, source="bench", max_attempts=3)
                db.session.remove()
            arrived = arrivals.wait_for(message.message_id, timeout=limit)
            if arrived is None:
                print(f"message {n}: not received within {limit:.0f}s")
                return False
            waits.append(arrived - queued)
    finally:
        stop_workers(workers)
        with app.app_context():
            db.session.execute(sa.delete(WorkerBeat))
            db.session.commit()
            db.session.remove()
    found = quantiles(waits)
    goals = GOALS if args.case == "idle" else LOADED_GOALS
    met = all(found[k] < goal for k, goal in goals.items())
    where = "" if args.case == "idle" else f", over {args.delay * 1000:g} ms each way"
    print(f"{sa.make_url(args.url).get_backend_name()}, wake-ups {args.wake_ups}{where}, "
          f"{len(waits)} messages, queue-to-250: {shown(waits)}; goals {said(goals)}: "
          f"{'PASS' if met else 'FAIL'}")  # fmt: skip
    return met


def said(goals: dict[str, float]) -> str:
    return ", ".join(f"{k} < {v * 1000:g} ms" for k, v in goals.items())


def beside_mailing(args, arrivals, env, folder) -> bool:  # type: ignore[no-untyped-def]
    """The mailing drained alone, then again beside transactional messages; whether the
    goals were met."""
    alone, _ = mailing_run(args, arrivals, env, folder, every=None)
    beside, waits = mailing_run(args, arrivals, env, folder, every=args.every)
    found = quantiles(waits)
    met = all(found[k] < goal for k, goal in LOADED_GOALS.items())
    kept = beside / alone
    print(f"{sa.make_url(args.url).get_backend_name()}, a mailing of {args.recipients:,} with "
          f"{args.processes} workers: drained {alone:,.0f} mails/s alone, {beside:,.0f} beside "
          f"transactional mail ({100 * kept:.0f}%; goal at least {100 * DRAIN_KEPT:.0f}%): "
          f"{'PASS' if kept >= DRAIN_KEPT else 'FAIL'}")  # fmt: skip
    print(f"  {len(waits)} transactional messages, one every {args.every * 1000:g} ms, "
          f"queue-to-250: {shown(waits)}; goals {said(LOADED_GOALS)}: "
          f"{'PASS' if met else 'FAIL'}")  # fmt: skip
    return met and kept >= DRAIN_KEPT


def mailing_run(args, arrivals, env, folder, every):  # type: ignore[no-untyped-def]
    """Drain a freshly stored mailing with args.processes workers, storing a transactional
    message every `every` seconds meanwhile (None: none); the drain rate (first to last of
    the mailing's arrivals) and the transactional messages' queue-to-250."""
    with drain.exclusive(args.url):
        app = drain.prepare(args.url, args.recipients, [], stream="broadcast")
    arrivals.forget()
    sent: dict[str, float] = {}
    stop = threading.Event()

    def post() -> None:
        began, n = time.monotonic(), 0
        while not stop.wait(max(0.0, began + n * every - time.monotonic())):
            draft = Draft(from_addr=Mailbox("shop@example.com"),
                          to=[Mailbox(BUYER)], text=f"receipt {n}")  # fmt: skip
            with app.app_context():
                queued = time.monotonic()
                message, _ = queue.enqueue(draft, source="bench", max_attempts=3)
                db.session.remove()
            sent[message.message_id] = queued
            n += 1

    poster = threading.Thread(target=post)
    workers = start_workers(args.processes, env, folder)
    try:
        wait_beating(app, args.processes)
        if every is not None:
            poster.start()
        limit = 60 + args.recipients / 50  # a guard against a stall: 50 mails/s at worst
        if not arrivals.wait_others(args.recipients, limit):
            raise SystemExit(f"the mailing did not drain within {limit:.0f} s")
        stop.set()
        if every is not None:
            poster.join()
        for message_id in list(sent):
            if arrivals.wait_for(message_id, timeout=60) is None:
                raise SystemExit(f"transactional {message_id} not received within 60 s")
    finally:
        stop.set()
        stop_workers(workers)
        with app.app_context():
            db.engine.dispose()  # the next run drops the database
    with arrivals.changed:
        seen = dict(arrivals.seen)
    times = sorted(t for mid, t in seen.items() if mid not in sent)
    rate = (len(times) - 1) / (times[-1] - times[0])
    return rate, [seen[mid] - queued for mid, queued in sent.items()]


if __name__ == "__main__":
    sys.exit(main())
