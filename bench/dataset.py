"""The outbox the benchmarks run on: a database filled with a month of realistic mail.

Messages spread over the last 30 days, mostly sent, some failed, deferred, queued or
cancelled and a few being sent, each tried message with its attempt row. Refilling drops
and recreates the one database named in the URL, so its name must contain "bench".
"""

import random
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from flask import Flask
from flask_migrate import upgrade

from outbox import create_app
from outbox.core.addresses import Kind
from outbox.core.recipients import Recipient
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import Attempt, Message, utcnow
from outbox.models.db import db
from outbox.ops import heartbeats, rollups

MESSAGES = cast(sa.Table, Message.__table__)
ATTEMPTS = cast(sa.Table, Attempt.__table__)
Row = dict[str, Any]  # one row for a Core INSERT
CHUNK = 5_000  # messages per INSERT batch and per transaction while filling
SPAN = timedelta(days=30)  # messages are spread over this much of the past

# Share of each status; sent takes the rest.
SHARES = {Status.FAILED: 0.02, Status.DEFERRED: 0.01, Status.QUEUED: 0.005,
          Status.CANCELLED: 0.005, Status.SENDING: 0.0003}  # fmt: skip
SHARES = {Status.SENT: 1 - sum(SHARES.values()), **SHARES}

FIRST = ("anna", "ben", "chloe", "david", "emma", "felix", "grace", "hugo", "ines", "jonas",
         "kira", "liam", "mara", "noah", "olga", "paul", "rosa", "sam", "tara", "victor",
         "wanda", "yusuf", "zoe", "amir", "bianca", "carlos", "dora", "emil", "fatima")  # fmt: skip
LAST = ("meyer", "schmidt", "dubois", "rossi", "garcia", "novak", "jensen", "smith", "kowalski",
        "silva", "mueller", "brown", "nguyen", "okafor", "tanaka", "larsen", "moreau", "weber",
        "fischer", "costa", "ivanova", "hughes", "becker", "lopez", "wagner")  # fmt: skip
DOMAINS = ("example.com", "example.org", "mail.example.net", "customers.example.co.uk",
           "example.de", "post.example.fr", "example.io")  # fmt: skip
# (subject template, priority): password resets and sign-in codes jump the queue.
# The weekly summary and the renewal notice go out as broadcast mail (core.streams).
SUBJECTS = (
    ("Your order #{n} has shipped", 0),
    ("Receipt for your payment of €{amount}", 0),
    ("Reset your password", 10),
    ("Your sign-in code is {code}", 10),
    ("Welcome to Acme, {name}!", 0),
    ("{name}, your weekly summary is ready", 0),
    ("Invoice {n} is due on {day}", 0),
    ("New sign-in to your account from {city}", 5),
    ("Your subscription renews in 7 days", 0),
    ("Confirm your email address", 5),
    ("{name} mentioned you in a comment", 0),
    ("Your return for order #{n} was received", 0),
)
BROADCAST = ("{name}, your weekly summary is ready", "Your subscription renews in 7 days")
CITIES = ("Berlin", "Lisbon", "Warsaw", "Lyon", "Oslo", "Austin", "Osaka", "Lagos")
SENTENCES = (
    "Thank you for shopping with us.",
    "You can follow the parcel with the tracking link in your account.",
    "If you did not ask for this, you can ignore this message.",
    "The link is valid for 30 minutes.",
    "Your invoice is attached as a PDF and also available in your account.",
    "Questions? Reply to this mail and our team will get back to you within a day.",
    "We have updated our privacy policy; the changes take effect next month.",
    "Here is what happened in your projects this week.",
    "Three new comments are waiting for your reply.",
    "Your payment was received and your order is being prepared.",
    "To keep your account safe, never share this code with anyone.",
    "You are receiving this because you have an account with Acme.",
)
# The search page looks for a word only a few subjects hold, so it has to scan far.
RARE_WORD = "escrow"
RARE_EVERY = 20_000  # one message in this many has the rare word in its subject
ERRORS = {
    Status.FAILED: (550, "550 5.1.1 <{to}>: Recipient address rejected: User unknown"),
    Status.DEFERRED: (421, "421 4.7.0 Try again later, closing connection."),
    Status.SENT: (250, None),
}


def make_app(url: str) -> Flask:
    return create_app({"DATABASE_URL": url, "SECRET_KEY": "bench", "MAIL_PORT": 1})


def _server(url: sa.URL) -> sa.Engine:
    """An engine on the server itself, for CREATE and DROP DATABASE."""
    if url.get_backend_name() == "postgresql":
        return sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    return sa.create_engine(url.set(database=""))


LOCAL = {"127.0.0.1", "localhost", "::1"}


def server_pid(url: str) -> int | None:
    """The process of the MariaDB/MySQL server that url names, from its pid file, if local.

    Not `pidof`: another server (a test's private one) may be running beside it, and the
    first one found would be watched instead. None for another database or a remote one.
    """
    target = sa.engine.make_url(url)
    if target.get_backend_name() != "mysql" or target.host not in LOCAL:
        return None
    engine = sa.create_engine(target)
    try:
        with engine.connect() as conn:
            path = conn.scalar(sa.text("SELECT @@pid_file"))
    finally:
        engine.dispose()
    try:
        return int(Path(str(path)).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def database(url: str, *, recreate: bool) -> None:
    """Create the database of url if missing; with recreate, drop it first."""
    target = sa.make_url(url)
    name = target.database or ""
    if recreate and "bench" not in name:
        sys.exit(f"refusing to drop database {name!r}: its name does not contain 'bench'")
    server = _server(target)
    quoted = server.dialect.identifier_preparer.quote(name)
    try:
        with server.connect() as conn:
            if recreate:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted}")
            if server.dialect.name == "postgresql":
                known = sa.text("SELECT 1 FROM pg_database WHERE datname = :name")
                if conn.execute(known, {"name": name}).first() is None:
                    conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
            else:
                conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {quoted}")
            conn.commit()
    finally:
        server.dispose()


def _addresses(rng: random.Random) -> tuple[list[Recipient], str]:
    """One or two recipients for the recipients column, and a first name."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    to = [Recipient(Kind.TO, f"{first}.{last}@{rng.choice(DOMAINS)}")]
    if rng.random() < 0.1:
        to.append(Recipient(Kind.TO, f"{rng.choice(FIRST)}@{rng.choice(DOMAINS)}"))
    return to, first.title()


def _bodies(rng: random.Random, name: str) -> tuple[str, str]:
    said = rng.sample(SENTENCES, rng.randint(3, 6))
    text = f"Hi {name},\n\n" + "\n\n".join(said) + "\n\nThe Acme team\nhttps://example.com\n"
    paragraphs = "".join(f"<p>{line}</p>" for line in said)
    markup = (
        f'<html><body style="font-family:sans-serif"><p>Hi {name},</p>{paragraphs}'
        '<p>The Acme team<br><a href="https://example.com">example.com</a></p></body></html>'
    )
    return text, markup


def _row(
    pk: int, status: Status, created: datetime, now: datetime, rng: random.Random
) -> tuple[Row, Row | None]:
    """One message and, if it was tried, its attempt (as dicts for a Core INSERT)."""
    to, name = _addresses(rng)
    template, priority = rng.choice(SUBJECTS)
    subject = template.format(n=100_000 + pk, amount=f"{rng.uniform(5, 500):.2f}", name=name,
                              code=rng.randint(100_000, 999_999), city=rng.choice(CITIES),
                              day=(created + timedelta(days=14)).strftime("%d %b"))  # fmt: skip
    if pk % RARE_EVERY == 7:
        subject = f"Your {RARE_WORD} payment for contract {pk} was released"
    text, markup = _bodies(rng, name)
    keyed = rng.random() < 0.5
    message = dict(
        id=pk, message_id=f"<{pk}.{rng.getrandbits(48):012x}@example.com>",
        from_addr="noreply@example.com", from_name="Acme", recipients=to, reply_to_name="",
        reply_to="support@example.com" if rng.random() < 0.2 else None, subject=subject,
        text_body=text, html_body=markup if rng.random() < 0.8 else None,
        headers={"List-Unsubscribe": f"<https://example.com/u/{pk}>"} if pk % 10 == 3 else None,
        priority=priority, send_after=None, status=status.value, attempts=0, max_attempts=10,
        last_retry=None, next_attempt_at=created, last_error=None, locked_by=None,
        locked_at=None, sent_at=None, settled_at=None, created_at=created,
        source="api:shop" if keyed else "api:crm",
        idempotency_key=f"order-{pk}" if keyed else None,
        request_hash=f"{pk:064x}" if keyed else None, attachment_count=0,
        stream=(Stream.BROADCAST if template in BROADCAST else Stream.TRANSACTIONAL).value,
    )  # fmt: skip
    if status is Status.CANCELLED:
        message["settled_at"] = created
    if status is Status.SENDING:
        message.update(locked_by=rng.choice(("worker-a", "worker-b")),
                       locked_at=now - timedelta(seconds=rng.uniform(0, 30)))  # fmt: skip
    if status not in ERRORS:
        return message, None
    started = created + timedelta(seconds=rng.uniform(0.5, 20))
    finished = min(started + timedelta(seconds=rng.uniform(0.05, 2)), now)
    code, error = ERRORS[status]
    error = error.format(to=to[0].address) if error else None
    message.update(attempts=1, last_retry=finished, last_error=error)
    if status is Status.SENT:
        message["sent_at"] = finished
    if status in (Status.SENT, Status.FAILED):  # settled as the outcome is recorded
        message["settled_at"] = finished
    if status is Status.DEFERRED:  # due again within the next hour, some already due
        message["next_attempt_at"] = now + timedelta(seconds=rng.uniform(-600, 3600))
    attempt = dict(message_pk=pk, started_at=started, finished_at=finished,
                   worker_id=rng.choice(("worker-a", "worker-b")), outcome=status.value,
                   smtp_code=code, error=error)  # fmt: skip
    return message, attempt


def chunks(rows: int, now: datetime, seed: int = 1) -> Iterator[tuple[list[Row], list[Row]]]:
    """Messages 1..rows, oldest first, CHUNK at a time, with their attempts."""
    rng = random.Random(seed)
    start, step = now - SPAN, SPAN / rows
    statuses, weights = list(SHARES), list(SHARES.values())
    for first in range(1, rows + 1, CHUNK):
        size = min(CHUNK, rows + 1 - first)
        messages: list[Row] = []
        attempts: list[Row] = []
        for pk, status in zip(
            range(first, first + size), rng.choices(statuses, weights, k=size), strict=True
        ):
            created = start + step * (pk - rng.random())
            message, attempt = _row(pk, status, created, now, rng)
            messages.append(message)
            if attempt is not None:
                attempts.append(attempt)
        yield messages, attempts


def fill(rows: int) -> None:
    """Insert the messages and attempts, one transaction per chunk; print the rate."""
    now = utcnow()
    began, attempts = time.perf_counter(), 0
    for messages, tries in chunks(rows, now):
        db.session.execute(sa.insert(MESSAGES), messages)
        if tries:
            db.session.execute(sa.insert(ATTEMPTS), tries)
        db.session.commit()
        attempts += len(tries)
        done = messages[-1]["id"]
        if done % 100_000 == 0 or done == rows:
            print(f"  {done:,} messages ({time.perf_counter() - began:.0f} s)", flush=True)
    took = time.perf_counter() - began
    total = rows + attempts
    print(f"filled {rows:,} messages and {attempts:,} attempts in {took:.1f} s: "
          f"{rows / took:,.0f} messages/s, {total / took:,.0f} rows/s")  # fmt: skip
    dialect = db.engine.dialect.name
    if dialect == "postgresql":  # explicit ids leave the sequence behind
        db.session.execute(sa.text("SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                                   "(SELECT max(id) FROM messages))"))  # fmt: skip
        db.session.commit()
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE messages, attempts")
    else:  # fresh statistics, as a table that grew slowly would have
        db.session.execute(sa.text("ANALYZE TABLE messages, attempts")).all()
        db.session.commit()


def prepare(url: str, rows: int, refill: bool) -> Flask:
    """A migrated database holding exactly rows messages, a staff account and two workers."""
    database(url, recreate=False)
    app = make_app(url)
    with app.app_context():
        upgrade()
        have = db.session.execute(sa.select(sa.func.count()).select_from(Message)).scalar_one()
        db.session.commit()
        reuse = have == rows and not refill
        db.engine.dispose()
    if reuse:
        print(f"reusing {have:,} messages in {sa.make_url(url).database} (--refill to refill)")
    else:
        print(f"filling: {have:,} messages found, {rows:,} wanted")
        if have:  # start from an empty schema: explicit ids from 1, no stray attempts
            database(url, recreate=True)
        with app.app_context():
            upgrade()
            fill(rows)
    with app.app_context():
        newest = db.session.execute(sa.select(sa.func.max(Message.created_at))).scalar()
        if newest is not None and utcnow() - newest > timedelta(hours=6):
            print(f"note: the newest message is from {newest:%Y-%m-%d %H:%M}; the hourly chart"
                  " now sees less than a day's attempts (--refill for fresh data)")  # fmt: skip
        for worker in ("worker-a", "worker-b"):
            heartbeats.beat(worker, utcnow() - timedelta(hours=3), 0)
        # What a running worker keeps fresh: the full counts the pages show past the cap.
        started = time.perf_counter()
        counted = sum(rollups.refresh_counts().values())
        took = (time.perf_counter() - started) * 1000
        print(f"full count per status, as a worker makes it: {counted:,} messages, {took:.0f} ms")
        # And the chart's settled hours, which the page reads instead of the attempts.
        started = time.perf_counter()
        kept = rollups.roll_up_hours()
        took = (time.perf_counter() - started) * 1000
        print(f"settled hours of the chart, as a worker keeps them: {kept} stored, {took:.0f} ms")
        # And the charts per stream's settled hours (a week's), read in their place.
        started = time.perf_counter()
        kept = 0
        while made := rollups.roll_up_stream_hours():  # a few hours each, as workers do
            kept += made
        took = (time.perf_counter() - started) * 1000
        print(f"settled hours per stream, as a worker keeps them: {kept} stored, {took:.0f} ms")
    return app
