"""A mailing of 100,000 recipients with a 50 KB HTML body, beside single messages (by hand).

    .venv/bin/python bench/mailing.py                      # MariaDB, 100,000 recipients
    .venv/bin/python bench/mailing.py --recipients 20000 --url postgresql+psycopg://...

It measures, in one run on one database: the storage the mailing takes (its rows, the
mailing, their indexes) beside --sample full messages with the same body stored the usual
way (queue.enqueue_batch, as POST /api/messages/batch stores them), scaled up to as many
messages as the mailing has recipients; the time gunicorn takes to accept the mailing over
HTTP and the web process's peak RSS meanwhile; the time to cancel it (chunked moves); and
the drain rate of those --sample single messages beside a mailing of as many, each by
--processes `outbox send-queued` processes into Postfix's smtp-sink.
"""

import argparse
import http.client
import json
import sys
import tempfile
import time
from pathlib import Path

import dataset
import drain
import enqueue
import smtpsink
import sqlalchemy as sa
from flask import Flask
from flask_migrate import upgrade

from outbox import queue
from outbox.auth import tokens
from outbox.core.drafts import build_draft
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_mailing?charset=utf8mb4"
TABLES = ("messages", "mailings", "mailing_attachments", "mailing_attachment_chunks")
SENDER = "Acme <news@example.com>"


def html_body(kib: int) -> str:
    """A newsletter of about kib KiB: varied paragraphs, two fields of the recipient's."""
    sentences = dataset.SENTENCES
    parts, n = ["<html><body><p>Hi {{ first }},</p>"], 0
    while sum(map(len, parts)) < kib * 1024 - 200:
        parts.append(f"<p id='p{n}'>{sentences[n % len(sentences)]} ({n})</p>")
        n += 1
    parts.append("<p>Your plan: {{ plan }}</p></body></html>")
    return "".join(parts)


def mailing_body(count: int, html: str) -> bytes:
    recipients = [{"email": f"reader{n}@example.com", "name": f"Reader {n}",
                   "fields": {"first": f"Reader{n}", "plan": ("gold", "tin")[n % 2]}}
                  for n in range(count)]  # fmt: skip
    return json.dumps({"from": SENDER, "subject": "News for {{ first }}", "html": html,
                       "text": "Hi {{ first }}, your plan: {{ plan }}",
                       "recipients": recipients}).encode()  # fmt: skip


def sizes(app: Flask) -> dict[str, int]:
    """Bytes each table takes with its indexes: exact after ANALYZE (MariaDB), or
    pg_total_relation_size (PostgreSQL, TOAST included)."""
    found = {}
    with app.app_context():
        dialect = db.engine.dialect.name
        for table in TABLES:
            if dialect == "postgresql":
                stmt = sa.text(f"SELECT pg_total_relation_size('{table}')")
            else:
                db.session.execute(sa.text(f"ANALYZE TABLE {table}")).all()
                stmt = sa.text(
                    "SELECT data_length + index_length FROM information_schema.TABLES "
                    f"WHERE table_schema = DATABASE() AND table_name = '{table}'"
                )
            found[table] = int(db.session.scalar(stmt) or 0)
        db.session.remove()
    return found


def peak_kib(pid: int, key: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def request(port: int, token: str, method: str, path: str, data: bytes | None = None) -> dict:  # type: ignore[type-arg]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    if response.status >= 300:
        sys.exit(f"{method} {path}: {response.status} {answer}")
    return answer  # type: ignore[no-any-return]


def store_singles(app: Flask, count: int, html: str) -> float:
    """count full messages with the body rendered, 1,000 a batch; the seconds it took."""
    began = time.perf_counter()
    with app.app_context():
        for first in range(0, count, 1000):
            drafts = [build_draft({"from": SENDER, "to": [f"single{n}@example.com"],
                                   "subject": f"News for Single{n}",
                                   "text": f"Hi Single{n}, your plan: gold",
                                   "html": html.replace("{{ first }}", f"Single{n}")
                                   .replace("{{ plan }}", "gold")}, None)
                      for n in range(first, min(first + 1000, count))]  # fmt: skip
            queue.enqueue_batch(drafts, source="bench", max_attempts=3)
        db.session.remove()
    return time.perf_counter() - began


def drained(url: str, processes: int, sink: smtpsink.Sink, folder: Path) -> tuple[float, int]:
    """Run send-queued processes until the queue is empty; seconds and messages sent."""
    env = drain.worker_env(url, sink.host, sink.port, folder, {"OUTBOX_SECRET_KEY": "bench"})
    seconds, runs = drain.drain(processes, env, folder, None)
    for run in runs:
        if run.code != 0:
            sys.exit(f"send-queued failed: {drain.last_line(run.stderr)}")
    sent = sum((run.tally() or (0, 0, 0))[0] for run in runs)
    return seconds, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (dropped, refilled)")
    parser.add_argument("--recipients", type=int, default=100_000)
    parser.add_argument("--html-kib", type=int, default=50)
    sample = "full messages stored and drained; the size of the mailing drained"
    parser.add_argument("--sample", type=int, default=10_000, help=sample)
    parser.add_argument("--processes", type=int, default=2, help="send-queued processes")
    args = parser.parse_args()
    html = html_body(args.html_kib)
    with drain.exclusive(args.url):
        dataset.database(args.url, recreate=True)
        app = dataset.make_app(args.url)
        with app.app_context():
            upgrade()
            token = tokens.create("bench")
            db.session.remove()
        empty = sizes(app)
        run(args, app, token, html, empty)


def run(args: argparse.Namespace, app: Flask, token: str, html: str, empty: dict) -> None:  # type: ignore[type-arg]
    body = mailing_body(args.recipients, html)
    print(f"{sa.make_url(args.url)!r}: a mailing of {args.recipients:,} recipients, "
          f"HTML {len(html) / 1024:.0f} KiB, request {len(body) / 2**20:.1f} MiB")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        shape = argparse.Namespace(workers=1, worker_class="gthread", threads=2)
        server, port = enqueue.serve(args.url, shape, folder)
        try:
            (web,) = enqueue.worker_pids(server.pid)
            before = peak_kib(web, "VmRSS")
            began = time.perf_counter()
            made = request(port, token, "POST", "/api/mailings", body)
            took = time.perf_counter() - began
            peak = peak_kib(web)
            began = time.perf_counter()
            stored = sizes(app)
            cancelled = request(port, token, "POST", f"/api/mailings/{made['id']}/cancel")
            cancel_took = time.perf_counter() - began
            drain_body = mailing_body(args.sample, html)
            print(f"accepted {made['recipients']:,} recipients over HTTP in {took:.1f} s "
                  f"({made['recipients'] / took:,.0f}/s); web process RSS {before / 1024:.0f} "
                  f"MiB before, peak {peak / 1024:.0f} MiB (VmHWM)")  # fmt: skip
            print(f"cancelled {cancelled['moved']:,} waiting rows in {cancel_took:.1f} s")
            report_storage(args, app, html, empty, stored)
            compare_drains(args, port, token, drain_body)
        finally:
            server.terminate()
            server.wait(timeout=30)


def report_storage(args, app, html, empty, stored) -> None:  # type: ignore[no-untyped-def]
    mailing = sum(stored[t] - empty[t] for t in TABLES)
    took = store_singles(app, args.sample, html)
    after = sizes(app)
    per_message = (after["messages"] - stored["messages"]) / args.sample
    full = per_message * args.recipients
    print(f"stored {args.sample:,} full messages the usual way in {took:.1f} s")
    print(f"storage: mailing {mailing / 2**20:,.1f} MiB (messages rows "
          f"{(stored['messages'] - empty['messages']) / 2**20:,.1f}, mailings "
          f"{(stored['mailings'] - empty['mailings']) / 2**10:,.0f} KiB); "
          f"{args.recipients:,} full messages {full / 2**20:,.1f} MiB (from a sample of "
          f"{args.sample:,}: {per_message / 1024:.1f} KiB each); mailing/full = "
          f"{100 * mailing / full:.2f}% (goal < 5%)")  # fmt: skip


def compare_drains(args, port, token, drain_body) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as folder, smtpsink.Sink(record=False) as sink:
        # The singles stored for the storage figure first, then a mailing of as many.
        single_s, single_n = drained(args.url, args.processes, sink, Path(folder))
        request(port, token, "POST", "/api/mailings", drain_body)
        mailing_s, mailing_n = drained(args.url, args.processes, sink, Path(folder))
    print(f"drain, {args.processes} processes into smtp-sink: {single_n:,} single messages "
          f"in {single_s:.1f} s ({single_n / single_s:,.0f}/s); {mailing_n:,} mailing "
          f"recipients in {mailing_s:.1f} s ({mailing_n / mailing_s:,.0f}/s); mailing/single "
          f"= {(mailing_n / mailing_s) / (single_n / single_s):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
