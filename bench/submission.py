"""How fast `outbox smtpd` takes mail, beside bare smtplib into a plain aiosmtpd sink.

    .venv/bin/python bench/submission.py                    # MariaDB, 4 connections, 4,000 mails
    .venv/bin/python bench/submission.py --mails 10000 --connections 8 --rounds 3

The database named in --url is dropped, created and migrated (its name must contain
"bench"). Each round submits --mails mails of about 1 KB over --connections
connections (one client process each, STARTTLS on both sides, AUTH with an API token
for outbox) first to `outbox smtpd`, then to `python -m aiosmtpd` with its Sink handler,
which stores nothing; then the database must hold exactly the mails answered 250,
each under the id its reply named. See bench/README.md.
"""

import argparse
import os
import smtplib
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import dataset
import sqlalchemy as sa
import trustme
from flask_migrate import upgrade
from servers import free_port

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_submission?charset=utf8mb4"
BIN = Path(sys.executable).parent
BODY = ("Hello,\r\n\r\nyour order has shipped and should reach you within three working days. "
        "You can follow the parcel\r\nfrom your account page at any time.\r\n\r\nThank you "
        "for shopping with us.\r\n-- \r\nThe shop team\r\n") * 3  # fmt: skip


def mail(n: int) -> bytes:
    """The n-th mail: a transactional mail of about 1 KB with a Message-ID of its own."""
    return (f"From: Shop <shop@example.com>\r\nTo: customer{n}@example.com\r\n"
            f"Subject: Your order {n} has shipped\r\nMessage-ID: <bench-{n}@shop.example.com>\r\n"
            f"Date: Tue, 24 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
            f"Content-Type: text/plain; charset=us-ascii\r\n\r\n{BODY}").encode()  # fmt: skip


def submit(port: int, ca: str, login: tuple[str, str] | None, numbers: range) -> list[int]:
    """One client: numbers' mails over one connection; the ids the 250 replies named."""
    client = smtplib.SMTP("127.0.0.1", port, timeout=60)
    client.starttls(context=ssl.create_default_context(cafile=ca))
    client.ehlo()
    if login:
        client.login(*login)
    ids = []
    for n in numbers:
        replies = [client.mail("shop@example.com"), client.rcpt(f"customer{n}@example.com")]
        code, text = client.data(mail(n))
        if code != 250 or any(reply[0] != 250 for reply in replies):
            raise RuntimeError(f"mail {n}: {replies} {code} {text!r}")
        ids.append(int(text.split()[-1]) if text.startswith(b"2.0.0 queued as") else 0)
    client.quit()
    return ids


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(command: list[str], port: int, env: dict[str, str]) -> Iterator[int]:
    """A server process greeting on port; its pid."""
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                smtplib.SMTP("127.0.0.1", port, timeout=2).quit()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"{command[0]} did not start")
                time.sleep(0.1)
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def drive(name: str, pids: tuple[int, int | None], port: int, ca: str,
          login: tuple[str, str] | None, first: int,
          args: argparse.Namespace) -> tuple[float, list[int]]:  # fmt: skip
    """Submit the round's mails over the connections at once; the rate and the ids.

    pids: the server's, and the database server's if it is local (its CPU is shown too).
    """
    each = args.mails // args.connections
    parts = [range(first + c * each, first + (c + 1) * each) for c in range(args.connections)]
    pid, database = pids
    cpu = cpu_seconds(pid)
    database_cpu = cpu_seconds(database) if database else 0.0
    started = time.perf_counter()
    with ProcessPoolExecutor(args.connections) as pool:
        done = list(pool.map(submit, *zip(*[(port, ca, login, p) for p in parts], strict=True)))
    seconds = time.perf_counter() - started
    mails = each * args.connections
    per_mail = 1e6 * (cpu_seconds(pid) - cpu) / mails
    rate = mails / seconds
    shown = f"{1e6 * (cpu_seconds(database) - database_cpu) / mails:,.0f} us" if database else "-"
    print(f"  {name}: {mails:,} mails in {seconds:.2f} s: {rate:,.0f} mails/s; CPU a mail: "
          f"server {per_mail:,.0f} us, database {shown}")  # fmt: skip
    return rate, [i for ids in done for i in ids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--mails", type=int, default=4000, help="mails a round and server")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    dataset.database(args.url, recreate=True)
    app = dataset.make_app(args.url)
    with app.app_context():
        upgrade()
        token = tokens.create("bench", scopes=("send",))
        db.session.remove()
        db.engine.dispose()
    database = dataset.server_pid(args.url)
    rates: dict[str, list[float]] = {"outbox smtpd": [], "aiosmtpd sink": []}
    acknowledged: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        ca = trustme.CA()
        cert, key, ca_file = (str(Path(tmp) / n) for n in ("cert.pem", "key.pem", "ca.pem"))
        issued = ca.issue_cert("127.0.0.1")
        issued.private_key_pem.write_to_path(key)
        issued.cert_chain_pems[0].write_to_path(cert)
        ca.cert_pem.write_to_path(ca_file)
        env = {"OUTBOX_DATABASE_URL": args.url, "OUTBOX_SECRET_KEY": "bench",
               "OUTBOX_INSTANCE_PATH": tmp, "OUTBOX_SMTPD_TLS_CERT": cert,
               "OUTBOX_SMTPD_TLS_KEY": key, "OUTBOX_LOG_FORMAT": "text"}  # fmt: skip
        print(f"{args.connections} connections, {args.mails:,} mails a round, "
              f"{sa.make_url(args.url).get_backend_name()}; "
              f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
        for r in range(args.rounds):
            print(f"round {r + 1}")
            port = free_port()
            command = [str(BIN / "outbox"), "smtpd", "--listen", f"127.0.0.1:{port}"]
            with serving(command, port, env) as pid:
                rate, ids = drive("outbox smtpd", (pid, database), port, ca_file, ("bench", token),
                                  2 * r * args.mails, args)  # fmt: skip
            rates["outbox smtpd"].append(rate)
            acknowledged += ids
            port = free_port()
            command = [sys.executable, "-m", "aiosmtpd", "-n", "-c", "aiosmtpd.handlers.Sink",
                       "-l", f"127.0.0.1:{port}", "--tlscert", cert, "--tlskey", key]  # fmt: skip
            with serving(command, port, {}) as pid:
                rate, _ = drive("aiosmtpd sink", (pid, None), port, ca_file, None,
                                (2 * r + 1) * args.mails, args)  # fmt: skip
            rates["aiosmtpd sink"].append(rate)
    with app.app_context():
        stored = set(
            db.session.scalars(sa.select(Message.id).where(Message.source == "smtp:bench"))
        )
        db.session.remove()
    ok = stored == set(acknowledged) and len(acknowledged) == len(set(acknowledged))
    print(f"stored {len(stored):,} mails; answered 250 {len(acknowledged):,}: "
          f"{'exactly those' if ok else 'MISMATCH'}")  # fmt: skip
    ours, sink = (statistics.median(rates[k]) for k in ("outbox smtpd", "aiosmtpd sink"))
    print(f"median: outbox smtpd {ours:,.0f} mails/s, aiosmtpd sink {sink:,.0f} mails/s "
          f"({100 * ours / sink:.0f}% of the sink)")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
