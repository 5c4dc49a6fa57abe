"""How fast the staff pages answer on a big outbox, run by hand (not by pytest).

    .venv/bin/python bench/pages.py --rows 10000
    .venv/bin/python bench/pages.py            # 1,000,000 messages on MariaDB

The database named in --url is created if missing, migrated and filled (bench/dataset.py)
unless it already holds exactly --rows messages; then every staff page is timed through
the Flask test client as a signed-in staff account. See bench/README.md.
"""

import argparse
import html
import re
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import dataset
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from outbox import queue
from outbox.auth import accounts
from outbox.models.db import db

DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench?charset=utf8mb4"
GOAL_MS = 150.0  # a staff page should answer within this, median of the timed runs
STAFF = ("bench@example.com", "bench password")


def staff_id(app: Flask) -> str:
    """The session id of the bench staff account, created if missing."""
    with app.app_context():
        user = accounts.find(STAFF[0]) or accounts.create_user(*STAFF)
        return user.get_id()


@dataclass
class Statement:
    ms: float
    sql: str
    params: Any


class Statements:
    """Every statement run while `active`, with its time, from the engine's cursor events."""

    def __init__(self, engine: sa.Engine):
        self.active = False
        self.found: list[Statement] = []
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: sa.Connection, *_: Any) -> None:
        conn.info.setdefault("bench_started", []).append(time.perf_counter())

    def _after(
        self, conn: sa.Connection, _: Any, statement: str, parameters: Any, *__: Any
    ) -> None:
        ms = (time.perf_counter() - conn.info["bench_started"].pop()) * 1000
        if self.active:
            self.found.append(Statement(ms, statement, parameters))


@dataclass
class Timing:
    name: str
    path: str
    goal: float | None
    times: list[float]
    statements: list[Statement]
    error: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return f"ERROR: {self.error}"
        if self.goal is None:
            return "(no goal)"
        return "PASS" if self.median <= self.goal else "FAIL"


class PageError(Exception):
    """A page answered with something other than itself."""


def fetch(client: FlaskClient, path: str, headers: dict[str, str]) -> tuple[float, str]:
    """One GET, its time in ms and its body; PageError on anything but a page."""
    began = time.perf_counter()
    response = client.get(path, headers=headers)
    body = response.get_data(as_text=True)  # a streamed answer (the live events) in full
    ms = (time.perf_counter() - began) * 1000
    if response.status_code not in (200, 286):  # 286: the htmx fragment, nothing in flight
        where = f" to {response.location}" if response.location else ""
        raise PageError(f"answered {response.status_code}{where}")
    return ms, body


def time_page(client: FlaskClient, spy: Statements, name: str, path: str, goal: float | None,
              headers: dict[str, str], runs: int, warmup: int) -> Timing:  # fmt: skip
    timing = Timing(name, path, goal, [], [])
    try:
        for _ in range(warmup):
            fetch(client, path, headers)
        timing.times = [fetch(client, path, headers)[0] for _ in range(runs)]
        spy.found, spy.active = [], True
        try:  # one more request, instrumented, to see its statements
            fetch(client, path, headers)
        finally:
            spy.active = False
        timing.statements = spy.found
    except PageError as exc:
        timing.error = str(exc)
    return timing


def older_link(client: FlaskClient) -> str:
    """Where the "Older" link of the first page of /messages points."""
    try:
        _, body = fetch(client, "/messages", {})
    except PageError as exc:
        sys.exit(f"GET /messages {exc}")
    found = re.search(r'<a href="([^"]*before=\d+[^"]*)">Older</a>', body)
    if found is None:
        sys.exit("the first page of /messages has no Older link")
    return html.unescape(found.group(1))


def signed_in(app: Flask, user_id: str) -> FlaskClient:
    """A test client whose session belongs to the staff account, as tests/support/app.py does."""
    client = app.test_client()
    with client.session_transaction() as session:
        session["_user_id"] = user_id
        session["_fresh"] = True
    return client


def time_pages(app: Flask, user_id: str, spy: Statements, runs: int, warmup: int) -> list[Timing]:
    client = signed_in(app, user_id)
    htmx = {"HX-Request": "true"}
    # The live events answer one event and end (their lifetime is the page's time).
    app.config["LIVE_STREAM_SECONDS"] = 0
    pages: list[tuple[str, str, float | None, dict[str, str]]] = [
        ("dashboard", "/", GOAL_MS, {}),
        ("dashboard, 1 hour", "/?window=1h", GOAL_MS, {}),
        ("dashboard, 7 days", "/?window=7d", GOAL_MS, {}),
        ("live part (htmx poll)", "/?window=24h", GOAL_MS, htmx),
        ("live events, one event", "/live/events", GOAL_MS, {}),
        ("messages, all", "/messages", GOAL_MS, {}),
        ("messages, sent", "/messages?status=sent", GOAL_MS, {}),
        ("messages, failed", "/messages?status=failed", GOAL_MS, {}),
        ("messages, queued", "/messages?status=queued", GOAL_MS, {}),
        ("messages, page 2", older_link(client), GOAL_MS, {}),
        ("rows fragment (htmx)", "/messages", GOAL_MS, htmx),
        ("search, rare word", f"/messages?q={dataset.RARE_WORD}", None, {}),
        # The filter language: terms an index serves, and terms read in a window of ids.
        ("filter, failed from a domain", "/messages?q=status:failed+to:@example.de", GOAL_MS, {}),
        ("filter, error text, 7 days", "/messages?q=error:550+since:7d", GOAL_MS, {}),
        ("filter, sender, subject", "/messages?from=@example.com&subject=order", GOAL_MS, {}),
    ]
    return [time_page(client, spy, name, path, goal, headers, runs, warmup)
            for name, path, goal, headers in pages]  # fmt: skip


@dataclass
class Claims:
    batch: int
    claim_ms: list[float]
    release_ms: list[float]
    sizes: set[int]  # rows claimed per run


def time_claims(app: Flask, runs: int, warmup: int, batch: int = 100) -> Claims:
    """A worker's claim_batch (with the mail) then release of those claims; printed."""
    claims_ms: list[float] = []
    release_ms: list[float] = []
    sizes: set[int] = set()
    with app.app_context():
        for run in range(warmup + runs):
            began = time.perf_counter()
            claims = queue.claim_batch("bench", batch, with_mail=True)
            claimed = time.perf_counter()
            released = queue.release(claims)
            ended = time.perf_counter()
            if released != len(claims):
                sys.exit(f"released {released} of {len(claims)} claims")
            if run >= warmup:
                claims_ms.append((claimed - began) * 1000)
                release_ms.append((ended - claimed) * 1000)
                sizes.add(len(claims))
    print(f"\nclaim_batch('bench', {batch}, with_mail=True): "
          f"median {statistics.median(claims_ms):.1f} ms, "
          f"max {max(claims_ms):.1f} ms; release: median {statistics.median(release_ms):.1f} ms "
          f"({', '.join(map(str, sorted(sizes)))} claimed per run)")  # fmt: skip
    return Claims(batch, claims_ms, release_ms, sizes)


def print_table(timings: list[Timing], runs: int) -> None:
    print(f"\n{'page':<22} {'median ms':>9} {'max ms':>7} {'SQL':>4} {'SQL ms':>7}  "
          f"{'goal ' + format(GOAL_MS, 'g') + ' ms':<12} path")  # fmt: skip
    for t in timings:
        if t.error is not None:
            print(f"{t.name:<22} {'-':>9} {'-':>7} {'-':>4} {'-':>7}  {t.verdict:<12} {t.path}")
            continue
        sql_ms = sum(s.ms for s in t.statements)
        print(f"{t.name:<22} {t.median:>9.1f} {max(t.times):>7.1f} {len(t.statements):>4} "
              f"{sql_ms:>7.1f}  {t.verdict:<12} {t.path}")  # fmt: skip
    print(
        f"(median and max of {runs} timed requests after the warm-up; SQL and SQL ms: "
        "statements and their total time in one more request)"
    )


def explain(engine: sa.Engine, statement: Statement) -> None:
    """The plan of a statement, replayed with its own parameters on a raw DBAPI cursor."""
    reads = statement.sql.lstrip().upper().startswith("SELECT")
    prefixes = ["EXPLAIN"]
    if engine.dialect.name == "postgresql" and reads:
        prefixes = ["EXPLAIN (ANALYZE, BUFFERS)"]
    elif engine.dialect.name in ("mysql", "mariadb") and reads:
        prefixes.append("ANALYZE")  # runs the query: real row counts (r_rows) beside estimates
    raw = engine.raw_connection()
    try:
        for prefix in prefixes:
            cursor = raw.cursor()
            cursor.execute(f"{prefix} {statement.sql}", statement.params)
            names = [d[0] for d in cursor.description]
            print(f"    {prefix}:")
            print("      " + " | ".join(names))
            for row in cursor.fetchall():
                print("      " + " | ".join("" if v is None else str(v) for v in row))
            cursor.close()
        raw.rollback()
    finally:
        raw.close()


def print_statements(engine: sa.Engine, timing: Timing) -> None:
    """Every statement of one request of the page, slowest first, and the plan of the slowest."""
    statements = sorted(timing.statements, key=lambda s: s.ms, reverse=True)
    total = sum(s.ms for s in statements)
    print(f"\n{timing.name} ({timing.path}): {len(statements)} statements, {total:.1f} ms"
          " in SQL during one request; slowest first:")  # fmt: skip
    for s in statements:
        sql = " ".join(s.sql.split())
        print(f"  {s.ms:8.1f} ms  {sql[:400]}{' ...' if len(sql) > 400 else ''}")
        print(f"              params {s.params!r}"[:300])
    if statements:
        explain(engine, statements[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="SQLAlchemy URL of the bench database")
    parser.add_argument("--rows", type=int, default=1_000_000, help="messages to fill in")
    parser.add_argument("--refill", action="store_true", help="refill even if the count matches")
    parser.add_argument("--runs", type=int, default=10, help="timed requests per page")
    parser.add_argument("--warmup", type=int, default=2, help="untimed requests per page first")
    parser.add_argument("--sql", action="store_true", help="show statements of every page")
    args = parser.parse_args()

    app = dataset.prepare(args.url, args.rows, args.refill)
    user_id = staff_id(app)
    with app.app_context():
        engine = db.engine
    spy = Statements(engine)
    timings = time_pages(app, user_id, spy, args.runs, args.warmup)
    print_table(timings, args.runs)
    for timing in timings:
        if args.sql or timing.verdict == "FAIL":
            print_statements(engine, timing)
    time_claims(app, args.runs, args.warmup)


if __name__ == "__main__":
    main()
