"""How fast `outbox send-queued` drains a full queue into a fast SMTP sink, run by hand.

    .venv/bin/python bench/drain.py --messages 20000 --processes 3
    .venv/bin/python bench/drain.py                  # 100,000 messages, a process per core, MariaDB

Fills the bench database named in --url with queued messages, measures the ceiling (a
bare smtplib client per connection sending pre-built mails into the same sink), then
starts --processes `outbox send-queued` processes at once and times them until the last
exits. Prints messages/s, the share of the ceiling, what each process sent and its peak
RSS, and whether every message arrived exactly once. See bench/README.md.
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import re
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any, cast

import dataset
import smtpsink
import sqlalchemy as sa
from flask import Flask
from flask_migrate import upgrade

from outbox.config import DEFAULTS
from outbox.core.status import Outcome, Status
from outbox.models import CHUNK_BYTES, Attachment, AttachmentChunk, Attempt, Message, utcnow
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_drain?charset=utf8mb4"
WORKER = [sys.executable, "-m", "outbox", "send-queued"]
PY_SPY = Path(sys.executable).parent / "py-spy"
SENDER = "Acme <noreply@example.com>"
CHUNK = 5_000  # messages per INSERT batch and transaction while filling
CHUNK_DATA = 32 * 1024 * 1024  # bytes of attachment data per transaction, at most
WRAPPERS = re.compile(r"runpy|/click/|outbox/__main__\.py$")
TALLY = re.compile(r"sent (\d+), deferred (\d+), failed (\d+)")
PASS = re.compile(r"sent \d+, deferred \d+, failed \d+.* in (\d+\.\d) s$", re.MULTILINE)
MESSAGES = cast(sa.Table, Message.__table__)
ATTACHMENTS = cast(sa.Table, Attachment.__table__)
CHUNKS = cast(sa.Table, AttachmentChunk.__table__)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (dropped and refilled)")
    parser.add_argument("--messages", type=int, default=100_000, help="queued messages to drain")
    parser.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 2,
        help="send-queued processes at once (default: one per core)",
    )
    parser.add_argument("--batch", type=int, help="OUTBOX_BATCH_SIZE (default: the app's)")
    parser.add_argument("--threads", type=int, help="OUTBOX_THREADS, if the config has it")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other setting, passed as OUTBOX_NAME; repeatable",
    )
    parser.add_argument(
        "--attachments-kb",
        type=int,
        default=0,
        help="one attachment of this many KiB per message (0: none)",
    )
    parser.add_argument(
        "--stream", default="", help="the messages' stream (default: the column's default)"
    )
    parser.add_argument("--smtp", metavar="HOST:PORT", help="send to this server, not smtp-sink")
    parser.add_argument(
        "--sink-cmd",
        metavar="COMMAND",
        help="start this server instead of smtp-sink ({addr} = host:port)",
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="smtp-sink keeps no dump; exactly-once is checked in the database",
    )
    parser.add_argument(
        "--ceiling-seconds",
        type=float,
        default=5.0,
        help="how long each ceiling run sends (0: skip the ceiling)",
    )
    parser.add_argument(
        "--ceiling-only", action="store_true", help="measure the ceiling only, no drain"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the first process under py-spy and print its top functions",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="run the first process under valgrind's callgrind and print the instructions it"
        " ran: moved far less by the machine's load than the rates (slow: ~30 mails/s)",
    )
    args = parser.parse_args(argv)
    if args.profile and args.callgrind:
        parser.error("--profile or --callgrind, not both")
    return args


def settings(args: argparse.Namespace) -> dict[str, str]:
    """The OUTBOX_* settings the options ask for; refuse names the config does not have."""
    wanted = dict(item.split("=", 1) for item in args.set)
    if args.batch is not None:
        wanted["BATCH_SIZE"] = str(args.batch)
    if args.threads is not None:
        wanted["THREADS"] = str(args.threads)
    unknown = sorted(name for name in wanted if name not in DEFAULTS)
    if unknown:
        sys.exit(f"this outbox has no setting {', '.join(unknown)} (see outbox/config.py)")
    return {f"OUTBOX_{name}": value for name, value in wanted.items()}


# ---- filling the queue


def queued_rows(count: int, attachments: int = 0, seed: int = 7) -> Any:
    """Messages 1..count as queued, due now, CHUNK at a time: small transactional mails."""
    rng = random.Random(seed)
    now = utcnow()
    start = now - timedelta(hours=1)
    for first in range(1, count + 1, CHUNK):
        rows = []
        for pk in range(first, min(first + CHUNK, count + 1)):
            created = start + timedelta(hours=1) * (pk / (count + 1))
            row, _ = dataset._row(pk, Status.QUEUED, created, now, rng)
            if row["html_body"] is None:  # every one with both a text and an HTML part
                row["html_body"] = dataset._bodies(rng, "there")[1]
            row["attachment_count"] = attachments
            rows.append(row)
        yield rows


def _attachment_rows(messages: list[dict[str, Any]], payloads: list[bytes]) -> Any:
    """Attachment and chunk rows for messages, a bounded amount of data at a time."""
    attachments: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    held = 0
    for message in messages:
        for n, payload in enumerate(payloads):
            pk = message["id"] * len(payloads) + n
            attachments.append(dict(id=pk, message_pk=message["id"], size=len(payload),
                                    filename=f"report-{n + 1}.pdf",
                                    content_type="application/pdf"))  # fmt: skip
            for seq, at in enumerate(range(0, len(payload), CHUNK_BYTES)):
                chunks.append(dict(attachment_id=pk, seq=seq, data=payload[at : at + CHUNK_BYTES]))
                held += min(CHUNK_BYTES, len(payload) - at)
                if held >= CHUNK_DATA:
                    yield attachments, chunks
                    attachments, chunks, held = [], [], 0
    if attachments or chunks:
        yield attachments, chunks


def fill(count: int, attachment_sizes: list[int]) -> None:
    """Insert count queued messages (each with attachments of those sizes); print the rate."""
    payloads = [os.urandom(size) for size in attachment_sizes]  # incompressible, like a PDF
    began = time.perf_counter()
    for rows in queued_rows(count, len(payloads)):
        db.session.execute(sa.insert(MESSAGES), rows)
        for attachments, chunks in _attachment_rows(rows, payloads):
            if attachments:
                db.session.execute(sa.insert(ATTACHMENTS), attachments)
            if chunks:
                db.session.execute(sa.insert(CHUNKS), chunks)
            db.session.commit()
        db.session.commit()
    took = time.perf_counter() - began
    print(f"filled {count:,} queued messages in {took:.1f} s ({count / took:,.0f}/s)")
    if db.engine.dialect.name == "postgresql":  # explicit ids leave the sequences behind
        for table in ("messages", "attachments"):
            top = f"(SELECT coalesce(max(id), 0) + 1 FROM {table})"
            db.session.execute(
                sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), {top}, false)")
            )
        db.session.commit()


@contextlib.contextmanager
def exclusive(url: str) -> Iterator[None]:
    """Hold a server-wide lock named after the bench database for the whole run.

    Every run drops and refills its database; a second run on the same one would pull
    the tables from under the first one's workers.
    """
    target = sa.make_url(url)
    server = dataset._server(target)
    name = f"outbox-bench:{target.database}"
    try:
        with server.connect() as conn:
            if server.dialect.name == "postgresql":
                take = sa.text("SELECT pg_try_advisory_lock(hashtext(:name))")
            else:
                take = sa.text("SELECT GET_LOCK(:name, 0)")
            if not conn.execute(take, {"name": name}).scalar():
                sys.exit(
                    f"another bench run is using {target.database!r}; give this one its own --url"
                )
            yield
    finally:
        server.dispose()  # the lock ends with its connection


def prepare(url: str, count: int, attachment_sizes: list[int], stream: str = "") -> Flask:
    """A freshly created and migrated bench database holding count queued messages, of the
    given stream (the column's default if none)."""
    dataset.database(url, recreate=True)  # refuses a name without "bench"
    app = dataset.make_app(url)
    with app.app_context():
        upgrade()
        fill(count, attachment_sizes)
        if stream:
            db.session.execute(sa.update(MESSAGES).values(stream=stream))
            db.session.commit()
        db.engine.dispose()
    return app


# ---- the ceiling: bare smtplib into the same server


def sample_mail(attachment_sizes: list[int]) -> tuple[str, list[str], bytes]:
    """One mail of the kind the queue holds, as bytes, with its envelope."""
    rows = next(queued_rows(1))
    row = rows[0]
    mail = EmailMessage(policy=SMTP)
    recipients = [r.address for r in row["recipients"]]
    mail["From"] = f"{row['from_name']} <{row['from_addr']}>"
    mail["To"], mail["Subject"] = ", ".join(recipients), row["subject"]
    mail["Message-ID"] = row["message_id"]
    mail.set_content(row["text_body"])
    mail.add_alternative(row["html_body"], subtype="html")
    for n, size in enumerate(attachment_sizes):
        mail.add_attachment(os.urandom(size), "application", "pdf", filename=f"report-{n}.pdf")
    return "noreply@example.com", recipients, mail.as_bytes()


def _blast(address: tuple[str, int], mail: tuple[str, list[str], bytes], seconds: float,
           start: Any, results: Any) -> None:  # fmt: skip
    """Send the same mail over one connection for seconds; report (sent, seconds taken,
    CPU seconds used)."""
    sender, recipients, data = mail
    with smtplib.SMTP(*address, timeout=30) as smtp:
        smtp.ehlo()
        start.wait()
        began, cpu = time.perf_counter(), time.process_time()
        sent = 0
        while time.perf_counter() - began < seconds:
            smtp.sendmail(sender, recipients, data)
            sent += 1
        results.put((sent, time.perf_counter() - began, time.process_time() - cpu))


@dataclass
class Ceiling:
    """What bare smtplib clients got through a server: mails/s, and CPU per mail."""

    rate: float
    client_cpu: float = 0.0  # seconds a mail, the clients together
    server_cpu: float = 0.0  # seconds a mail, the server (0: not watched)


def ceiling(address: tuple[str, int], connections: int, seconds: float, mail: Any,
            server: int | None = None) -> Ceiling:  # fmt: skip
    """Mails/s that connections bare smtplib clients, one process each, get through,
    and the CPU a mail cost them and the server (pid server, if given)."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(connections), context.Queue()
    clients = [context.Process(target=_blast, args=(address, mail, seconds, start, results))
               for _ in range(connections)]  # fmt: skip
    for client in clients:
        client.start()
    server_before = cpu_seconds(server)
    done = [results.get(timeout=seconds + 60) for _ in clients]
    server_used = cpu_seconds(server) - server_before
    for client in clients:
        client.join()
    sent = sum(count for count, _, _ in done)
    return Ceiling(
        rate=sum(count / took for count, took, _ in done),
        client_cpu=sum(cpu for _, _, cpu in done) / max(sent, 1),
        server_cpu=server_used / max(sent, 1),
    )


# ---- the drain


@dataclass
class Run:
    """One send-queued process: its output files, exit code, peak RSS and end time."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    code: int | None = None
    peak_kib: int = 0
    ended: float = 0.0
    cpu: float = 0.0  # seconds of user and system time

    def watch(self) -> None:
        """Follow the process's own high-water mark (VmHWM) until it ends.

        wait4's ru_maxrss cannot be trusted here: a child started with vfork has the
        parent's peak folded into its own, and this process filled the database.
        """
        status = Path(f"/proc/{self.process.pid}/status")
        while self.code is None:
            with contextlib.suppress(OSError, StopIteration, ValueError):
                line = next(x for x in status.read_text().splitlines() if x.startswith("VmHWM:"))
                self.peak_kib = max(self.peak_kib, int(line.split()[1]))
            time.sleep(0.1)

    def wait(self) -> None:
        _, status, usage = os.wait4(self.process.pid, 0)
        self.ended = time.perf_counter()
        self.code = self.process.returncode = os.waitstatus_to_exitcode(status)
        self.cpu = usage.ru_utime + usage.ru_stime

    def pass_seconds(self) -> float | None:
        """The seconds of its pass, as its log line says: from its first claim to its end,
        without the start of Python, the app and the scheduler before it."""
        found = PASS.findall(self.stderr.read_text(errors="replace"))
        return float(found[-1]) if found else None

    def tally(self) -> tuple[int, int, int] | None:
        found = TALLY.findall(self.stdout.read_text(errors="replace"))
        return tuple(map(int, found[-1])) if found else None  # type: ignore[return-value]


def last_line(path: Path) -> str:
    """The last line of a log, where a traceback names its exception, cut to 500 characters."""
    lines = path.read_text(errors="replace").strip().splitlines() or [""]
    named = [line for line in lines if not line.startswith(("[", "(", " "))]
    return (named or lines)[-1][:500]


def worker_env(url: str, host: str, port: int, folder: Path, extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiling every module anew costs each start ~1 s
    env.update(OUTBOX_DATABASE_URL=url, OUTBOX_INSTANCE_PATH=str(folder),
               OUTBOX_MAIL_SERVER=host, OUTBOX_MAIL_PORT=str(port),
               OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com", **extra)  # fmt: skip
    return env


def drain(
    processes: int, env: dict, folder: Path, wrap: list[str], worker: list[str] = WORKER
) -> tuple[float, list[Run]]:
    """Start the processes at once; the seconds until the last exits, and each run."""
    runs = []
    began = time.perf_counter()
    for n in range(processes):
        argv = worker
        if wrap and n == 0:
            argv = [*wrap, *worker]  # under py-spy or callgrind
        out, err = folder / f"worker-{n}.out", folder / f"worker-{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
        runs.append(Run(process, out, err))
    waiters = [threading.Thread(target=run.wait) for run in runs]
    waiters += [threading.Thread(target=run.watch) for run in runs]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    return max(run.ended for run in runs) - began, runs


# ---- checking


def database_check(app: Flask, count: int) -> tuple[list[str], list[str]]:
    """Problems the tables show, and every Message-ID the queue holds."""
    problems = []
    with app.app_context():
        statuses = dict(db.session.execute(
            sa.select(Message.status, sa.func.count()).group_by(Message.status)).all())  # fmt: skip
        if statuses != {Status.SENT.value: count}:
            problems.append(f"statuses {statuses}, expected {{'sent': {count}}}")
        per_message = (sa.select(Attempt.message_pk, sa.func.count().label("n"))
                       .where(Attempt.outcome == Outcome.SENT.value)
                       .group_by(Attempt.message_pk).subquery())  # fmt: skip
        # {attempts with outcome sent: messages with that many}
        tries = sa.select(per_message.c.n, sa.func.count()).group_by(per_message.c.n)
        spread = dict(db.session.execute(tries).all())
        if spread != {1: count}:
            problems.append(f"messages by sent attempts: {spread}, expected {{1: {count}}}")
        ids = list(db.session.execute(sa.select(Message.message_id)).scalars())
        db.session.commit()
        db.engine.dispose()
    return problems, ids


def sink_check(sink: smtpsink.Sink, expected: list[str]) -> tuple[int, int, int]:
    """(duplicates, lost, unknown) Message-IDs in what the sink recorded."""
    received = sink.message_ids()
    wanted = {mid.encode() for mid in expected}
    duplicates = sum(n - 1 for n in received.values() if n > 1)
    return duplicates, len(wanted - received.keys()), len(received.keys() - wanted)


# ---- the profile


def instructions(path: Path) -> int:
    """The total a callgrind output file counted, 0 if it has none.

    Its start (Python, the app) is about 5.4 billion on 2026-11-24; a drain of 1,000
    and one of 3,000 give a mail's share as their difference over 2,000.
    """
    if not path.exists():
        return 0
    found = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.MULTILINE)
    return int(found[1]) if found else 0


# The steps of a worker's pass, each named by the function its samples pass through.
PHASES = [("claim (queue.claim_batch)", "claim_batch (claims.py)"),
          ("write the mail (mime.prepare)", "prepare (mime.py)"),
          ("SMTP (sender.deliver)", "deliver (sender.py)"),
          ("record outcomes (queue.record)", "record (outcomes.py)"),
          ("attachments (queue.read_attachments)", "read_attachments (attachments.py)"),
          ("heartbeat (heartbeats.beat)", "beat (heartbeats.py)")]  # fmt: skip
PASS_FRAME = "Worker.drain (worker.py)"  # outside it: Python, the app and the CLI starting


def top_functions(path: Path, limit: int = 15) -> str:
    """Steps and top functions by own and total time, from speedscope: the busiest thread's,
    with the sending lanes' (worker.py) folded in."""
    profile = json.loads(path.read_text())
    frames = profile["shared"]["frames"]
    names = [f"{f['name']} ({Path(f.get('file') or '?').name})" for f in frames]
    # Frames every sample passes through (runpy, click) only say "the command ran".
    wrappers = {n for n, f in zip(names, frames, strict=True) if WRAPPERS.search(f.get("file", ""))}
    threads = sorted(profile["profiles"], key=lambda t: -sum(t["weights"]))
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    main = threads[0]
    lanes = [t for t in threads if t is main or t["name"].startswith("lane-")]
    samples = [pair for t in lanes for pair in zip(t["samples"], t["weights"], strict=True)]
    for stack, weight in samples:
        if stack:
            own[names[stack[-1]]] += weight
        on_stack = {names[i] for i in stack}
        for name in on_stack - wrappers:
            total[name] += weight
        other = "the rest of the pass" if PASS_FRAME in on_stack else "outside the pass (start)"
        phase = next((title for title, name in PHASES if name in on_stack), other)
        phases[phase] += weight
    seconds = sum(weight for _, weight in samples)
    others = ", ".join(f"{t['name']} {sum(t['weights']):.1f} s" for t in threads[1:])
    lines = [f"{main['name']}: {seconds:.1f} s sampled holding the GIL (py-spy --gil)",
             f"  other threads: {others or 'none'}", "  by step of the pass:"]  # fmt: skip
    lines += [f"    {n / seconds:6.1%}  {phase}" for phase, n in phases.most_common()]
    for title, counts in (("own", own), ("total", total)):
        lines.append(f"  top by {title} time:")
        lines += [f"    {n / seconds:6.1%}  {name}" for name, n in counts.most_common(limit)]
    return "\n".join(lines)


# ---- the run


def connections(args: argparse.Namespace) -> int:
    """SMTP connections the drain uses: each process keeps MAIL_MAX_CONNECTIONS busy."""
    wanted = dict(item.split("=", 1) for item in args.set)
    return args.processes * int(
        wanted.get("MAIL_MAX_CONNECTIONS", DEFAULTS["MAIL_MAX_CONNECTIONS"])
    )


def measure_ceilings(args: argparse.Namespace, mail: Any) -> dict[str, float]:
    """Ceiling mails/s with as many connections as the drain uses, per kind of server."""
    found: dict[str, float] = {}
    count = connections(args)
    if args.ceiling_seconds <= 0:
        return found
    if args.smtp:
        host, port = args.smtp.rsplit(":", 1)
        found["given server"] = ceiling((host, int(port)), count, args.ceiling_seconds, mail).rate
        return found
    kinds = (
        [("sink-cmd", False)] if args.sink_cmd else [("smtp-sink", False), ("smtp-sink -D", True)]
    )
    for name, record in kinds:
        with smtpsink.Sink(record=record, command=args.sink_cmd) as sink:
            got = ceiling((sink.host, sink.port), count, args.ceiling_seconds, mail,
                          sink.process.pid)  # fmt: skip
        found[name] = got.rate
        print(f"ceiling, {name}, {count} connections: {got.rate:,.0f} mails/s (CPU per mail:"
              f" clients {1e6 * got.client_cpu:,.0f} us, sink {1e6 * got.server_cpu:,.0f} us)",
              flush=True)  # fmt: skip
    return found


def report(args: argparse.Namespace, elapsed: float, runs: list[Run], ceilings: dict) -> None:
    rate = args.messages / elapsed
    print(f"\ndrained {args.messages:,} in {elapsed:.1f} s: {rate:,.0f} messages/s")
    used = "smtp-sink" if args.no_record else "smtp-sink -D"
    base = ceilings.get(used) or next(iter(ceilings.values()), None)
    if base:
        print(f"  {rate / base:.0%} of the ceiling ({base:,.0f} mails/s)")
    passes = [seconds for run in runs if (seconds := run.pass_seconds()) is not None]
    if passes and len(passes) == len(runs):
        # A worker runs for days: its rate once started is what the ceiling compares with.
        longest = max(passes)
        steady = args.messages / longest
        share = f", {steady / base:.0%} of the ceiling" if base else ""
        print(f"  over the longest pass ({longest:.1f} s, without starting Python and the app):"
              f" {steady:,.0f} messages/s{share}")  # fmt: skip
    for n, run in enumerate(runs):
        tally = run.tally()
        said = "sent {}, deferred {}, failed {}".format(*tally) if tally else "no tally line"
        print(f"  process {n}: exit {run.code}, {said}, peak RSS {run.peak_kib / 1024:.0f} MiB,"
              f" exited {run.ended - min(r.ended for r in runs):.1f} s after the first"
              + (" (under py-spy)" if args.profile and n == 0 else "")
              + (" (under callgrind)" if args.callgrind and n == 0 else ""))  # fmt: skip
        if run.code != 0 or tally is None:
            print(f"    stderr ends: {last_line(run.stderr)}")


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    extra = settings(args)
    sizes = [args.attachments_kb * 1024] if args.attachments_kb else []
    print(f"load average {os.getloadavg()[0]:.2f}; settings: BATCH_SIZE="
          f"{args.batch or DEFAULTS['BATCH_SIZE']} {extra}")  # fmt: skip
    if args.ceiling_only:
        measure_ceilings(args, sample_mail(sizes))
        return 0
    with exclusive(args.url):
        return measured(args, extra, sizes)


def cpu_seconds(pid: int | None) -> float:
    """User and system time a process has used so far (Linux /proc), 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_report(count: int, runs: list[Run], server: float, sink: float) -> None:
    """CPU time per message: less shaken by a busy machine than the wall-clock rate."""
    workers = sum(run.cpu for run in runs)
    total = workers + server + sink
    print(f"  CPU per message: workers {1e6 * workers / count:,.0f} us, database server "
          f"{1e6 * server / count:,.0f} us, sink {1e6 * sink / count:,.0f} us; all "
          f"{1e6 * total / count:,.0f} us = at most {os.cpu_count() * count / total:,.0f} "
          f"msgs/s on {os.cpu_count()} cores")  # fmt: skip


def measured(args: argparse.Namespace, extra: dict[str, str], sizes: list[int]) -> int:
    """Fill, measure the ceiling, drain and check; 0 if every message went out once."""
    app = prepare(args.url, args.messages, sizes, args.stream)
    ceilings = measure_ceilings(args, sample_mail(sizes))
    folder = Path(tempfile.mkdtemp(prefix="outbox-drain-"))
    sink = None
    if args.smtp:
        host, port = args.smtp.rsplit(":", 1)
    else:
        sink = smtpsink.Sink(record=not args.no_record, command=args.sink_cmd)
        host, port = sink.host, str(sink.port)
    profile = folder / "profile.speedscope.json" if args.profile else None
    counted = folder / "callgrind.out" if args.callgrind else None
    wrap: list[str] = []
    if profile is not None:
        # --gil: only samples holding the GIL, so Python's own CPU time, not the
        # waits on the database and the SMTP server.
        wrap = [str(PY_SPY), "record", "--gil", "--rate", "100", "--format", "speedscope",
                "--output", str(profile), "--"]  # fmt: skip
    elif counted is not None:
        wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={counted}"]
    try:
        env = worker_env(args.url, host, int(port), folder, extra)
        server = dataset.server_pid(args.url)
        sink_pid = sink.process.pid if sink is not None else None
        before = cpu_seconds(server), cpu_seconds(sink_pid)
        elapsed, runs = drain(args.processes, env, folder, wrap)
        after = cpu_seconds(server), cpu_seconds(sink_pid)
        report(args, elapsed, runs, ceilings)
        cpu_report(args.messages, runs, after[0] - before[0], after[1] - before[1])
        ok = verdict(app, args.messages, sink)
    finally:
        if sink is not None:
            sink.close()
    if counted is not None:
        print(f"\ninstructions process 0 ran (callgrind, {counted}): {instructions(counted):,}")
    if profile is not None:
        print(f"\nprofile of process 0 ({profile}):")
        print(top_functions(profile) if profile.exists() else "  py-spy wrote no profile")
    print(f"load average {os.getloadavg()[0]:.2f}; worker output in {folder}")
    return 0 if ok else 1


def verdict(app: Flask, count: int, sink: smtpsink.Sink | None) -> bool:
    """Print whether every message went out exactly once; True if so."""
    problems, expected = database_check(app, count)
    received = sink.received() if sink is not None else None
    if received is not None:
        print(f"  the sink counted {received:,} mails")
        if received != count:
            problems.append(f"the sink counted {received:,} mails, expected {count:,}")
    if sink is not None and sink.record:
        sink.stop()
        duplicates, lost, unknown = sink_check(sink, expected)
        print(f"  sink dump: {duplicates} duplicates, {lost} lost, {unknown} unknown Message-IDs")
        if duplicates or lost or unknown:
            problems.append("the sink's Message-IDs do not match the queue")
    else:
        print("  no sink dump: exactly-once checked in the database only")
    for problem in problems:
        print(f"  PROBLEM: {problem}")
    print(f"exactly once: {'yes' if not problems else 'NO'}")
    return not problems


if __name__ == "__main__":
    sys.exit(main())
