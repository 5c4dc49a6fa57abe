"""Whether a claim and the staff pages cost as much at 1,000,000 messages as at 10,000, run by hand.

    .venv/bin/python bench/scale.py                  # MariaDB, 10,000 and 1,000,000 messages
    .venv/bin/python bench/scale.py --sizes 10000,100000 --rounds 5

Each size has a database of its own, named after the one in --url with the size
appended (outbox_bench_10000, outbox_bench_1000000), filled by bench/dataset.py
unless it already holds that many messages. Every round times each size in turn
with bench/pages.py's helpers; the figures are the medians over the rounds, and
the cost of each size is compared with the first. See bench/README.md.
"""

import argparse
import statistics
from dataclasses import dataclass

import dataset
import pages
import sqlalchemy as sa
from flask import Flask

from outbox.models.db import db

GOAL_RATIO = 1.5  # a claim and the dashboard may cost this much more at the largest size
PAGES = (("dashboard", "/"), ("messages", "/messages"), ("failed", "/messages?status=failed"))
GOALS = ("claim", "dashboard")  # the figures the verdict is about; the others are shown only
FIGURES = ("claim", "release", *(name for name, _ in PAGES))


@dataclass
class Size:
    rows: int
    app: Flask
    user_id: str
    spy: pages.Statements  # pages.time_page wants one; it listens on the engine for good
    rounds: list[dict[str, float]]  # each round's median ms per figure
    claimed: set[int]  # rows taken per claim

    def median(self, figure: str) -> float:
        return statistics.median(r[figure] for r in self.rounds)


def sized_url(url: str, rows: int) -> str:
    """The URL of the database for one size: the database name with the size appended."""
    target = sa.make_url(url)
    return target.set(database=f"{target.database}_{rows}").render_as_string(hide_password=False)


def prepare(url: str, rows: int, refill: bool) -> Size:
    app = dataset.prepare(sized_url(url, rows), rows, refill)
    with app.app_context():
        spy = pages.Statements(db.engine)
    return Size(rows, app, pages.staff_id(app), spy, [], set())


def time_round(size: Size, runs: int, warmup: int, batch: int | None) -> dict[str, float]:
    """One round on one size: the median ms of the claim, its release and each page."""
    client = pages.signed_in(size.app, size.user_id)
    found: dict[str, float] = {}
    for name, path in PAGES:
        timing = pages.time_page(client, size.spy, name, path, None, {}, runs, warmup)
        if timing.error is not None:
            raise SystemExit(f"{size.rows:,} messages: GET {path} {timing.error}")
        found[name] = timing.median
    batch = batch or size.app.config["BATCH_SIZE"]
    claims = pages.time_claims(size.app, runs, warmup, batch)
    found["claim"] = statistics.median(claims.claim_ms)
    found["release"] = statistics.median(claims.release_ms)
    size.claimed |= claims.sizes
    return found


def print_row(label: str, figures: dict[str, float], claimed: str) -> None:
    cells = " ".join(f"{figures[f]:>12.1f}" for f in FIGURES)
    print(f"{label:<12} {cells}  {claimed}")


def print_header(title: str) -> None:
    header = " ".join(f"{f + ' ms':>12}" for f in FIGURES)
    print(f"\n{title}\n{'messages':<12} {header}  claimed per claim")


def print_summary(sizes: list[Size], rounds: int) -> None:
    print_header(f"median of {rounds} rounds")
    for size in sizes:
        claimed = ", ".join(map(str, sorted(size.claimed)))
        print_row(f"{size.rows:,}", {f: size.median(f) for f in FIGURES}, claimed)
    first = sizes[0]
    for size in sizes[1:]:
        print(f"\n{size.rows:,} / {first.rows:,} messages (goal: at most {GOAL_RATIO:g}x for "
              f"{' and '.join(GOALS)})")  # fmt: skip
        for figure in FIGURES:
            ratio = size.median(figure) / first.median(figure)
            verdict = ("PASS" if ratio <= GOAL_RATIO else "FAIL") if figure in GOALS else ""
            print(f"  {figure:<10} {ratio:>5.2f}x  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=pages.DEFAULT_URL,
                        help="SQLAlchemy URL; each size gets <database>_<size>")  # fmt: skip
    parser.add_argument("--sizes", default="10000,1000000", help="messages, smallest first")
    parser.add_argument("--rounds", type=int, default=3, help="times each size is timed")
    parser.add_argument("--runs", type=int, default=20, help="timed requests and claims a round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed ones before those")
    parser.add_argument("--batch", type=int, help="rows per claim (default: BATCH_SIZE, 100)")
    parser.add_argument("--refill", action="store_true", help="refill even if the count matches")
    args = parser.parse_args()

    sizes = [prepare(args.url, int(n), args.refill) for n in args.sizes.split(",")]
    for number in range(1, args.rounds + 1):
        timed = [time_round(size, args.runs, args.warmup, args.batch) for size in sizes]
        print_header(f"round {number}")
        for size, figures in zip(sizes, timed, strict=True):
            size.rounds.append(figures)
            print_row(f"{size.rows:,}", figures, ", ".join(map(str, sorted(size.claimed))))
    print_summary(sizes, args.rounds)


if __name__ == "__main__":
    main()
