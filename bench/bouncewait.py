"""What looking for waiting bounces adds to each group of outcomes a worker records.

    .venv/bin/python bench/bouncewait.py
    .venv/bin/python bench/bouncewait.py --url 'postgresql+psycopg://postgres@127.0.0.1:5432/outbox_bench_bouncewait'

Makes the bench database afresh with --stored bounce mails, none waiting, then times,
for a group of 100 recorded messages, bounces.store.apply_waiting (the hook queue.record
runs), the same look as an IN of the group's ids, and a bare SELECT 1, each followed by a
rollback as a recording's commit would end it. Prints microseconds a group. See
bench/README.md.
"""

import argparse
import hashlib
import time
from collections.abc import Callable

import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app
from outbox.capabilities.bounces import store
from outbox.core.status import Status
from outbox.models import BounceMail, utcnow
from outbox.models.db import db, dispose_engines

GROUP = 100


def fresh_database(url: str, create: bool = True) -> None:
    """Drop, then create, the database named in url (its name must contain bench)."""
    parsed = sa.engine.make_url(url)
    if "bench" not in (parsed.database or ""):
        raise SystemExit("the database's name must contain 'bench': it is dropped")
    server = parsed.set(database="postgres" if parsed.get_backend_name() == "postgresql" else "")
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f"DROP DATABASE IF EXISTS {parsed.database}"))
        if create:
            connection.execute(sa.text(f"CREATE DATABASE {parsed.database}"))
    engine.dispose()


def timed(runs: int, look: Callable[[], object]) -> float:
    """Microseconds a run of look and a rollback, after a few untimed runs."""
    for _ in range(20):
        look()
        db.session.rollback()
    started = time.perf_counter()
    for _ in range(runs):
        look()
        db.session.rollback()
    return (time.perf_counter() - started) / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="mysql+pymysql://root@127.0.0.1:3306/"
                        "outbox_bench_bouncewait?charset=utf8mb4")  # fmt: skip
    parser.add_argument("--stored", type=int, default=20_000, help="bounce mails stored")
    parser.add_argument("--runs", type=int, default=2_000)
    args = parser.parse_args()
    fresh_database(args.url)
    app = create_app({"DATABASE_URL": args.url, "SECRET_KEY": "bench", "TESTING": True})
    with app.app_context():
        upgrade()
        now = utcnow()
        rows = [{"received_at": now, "via": "smtp", "digest": hashlib.sha256(b"%d" % n).hexdigest(),
                 "size": 1, "raw": b"x", "kind": "hard", "subject": "", "from_header": "",
                 "message_pk": n, "waiting": False} for n in range(args.stored)]  # fmt: skip
        db.session.execute(sa.insert(BounceMail), rows)
        db.session.commit()
        ids = list(range(args.stored * 5, args.stored * 5 + GROUP))
        statuses = dict.fromkeys(ids, Status.SENT)
        c = BounceMail.__table__.c
        listed = sa.select(c.id).where(c.waiting == sa.true(), c.message_pk.in_(ids))
        found = {
            "apply_waiting (a range)": timed(args.runs, lambda: store.apply_waiting(statuses)),
            "an IN of the ids": timed(args.runs, lambda: db.session.execute(listed).all()),
            "SELECT 1": timed(args.runs, lambda: db.session.execute(sa.text("SELECT 1")).all()),
        }
        db.session.remove()
        dispose_engines()
    fresh_database(args.url, create=False)
    print(f"{sa.engine.make_url(args.url).get_backend_name()}, {args.stored} bounce mails, "
          f"a group of {GROUP}:")  # fmt: skip
    for name, micros in found.items():
        print(f"  {name}: {micros:.0f} us")


if __name__ == "__main__":
    main()
