"""Throttling across real processes: several takers of one bucket, three workers and a sink."""

import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from sqlalchemy import func, select

from outbox.capabilities.throttle.buckets import burst_of
from outbox.core.status import Status
from outbox.models import Attempt, Message
from outbox.models.db import db
from tests.support import processes
from tests.support.rows import enqueue_many, statuses
from tests.support.workers import wait_until, worker_env

HELPER = [sys.executable, "-m", "tests.support.throttling"]
# The sink as the one route, and a limit on the domain every test message goes to.
ROUTES = """
[[routes]]
name = "sink"
host = "127.0.0.1"
port = {port}
tls = "none"

[domains."example.com"]
rate = {rate}
"""


@pytest.mark.all_databases
def test_processes_taking_one_bucket_at_once_get_no_more_than_it_allows(app, db_kind, tmp_path):
    rate, seconds, count = 20.0, 4.0, 4
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path))  # fmt: skip
    takers = [
        processes.start(
            [*HELPER, "hammer", "domain:hammered.example", str(rate), str(seconds)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(count)
    ]
    try:
        assert [t.stdout.readline() for t in takers] == ["ready\n"] * count  # type: ignore[union-attr]
        for t in takers:  # all at once
            t.stdin.write("go\n")  # type: ignore[union-attr]
            t.stdin.flush()  # type: ignore[union-attr]
        outputs = [t.communicate(timeout=120)[0] for t in takers]
    finally:
        for t in takers:
            processes.kill_group(t)
    assert [t.returncode for t in takers] == [0] * count
    lines = [line.split() for out in outputs for line in out.splitlines()]
    granted = [float(line[0]) for line in lines if len(line) == 1]
    asked = [float(time) for line in lines if line[0] == "asked" for time in line[1:]]
    per_taker = [len(out.splitlines()) - 1 for out in outputs]
    # The bucket was made full at the first ask; since then, up to the last ask, it has
    # earned at most rate a second (tokens at each ask's now; buckets.py's argument).
    span = max(asked) - min(asked)
    assert granted and len(granted) <= burst_of(rate) + rate * span
    print(f"\n{db_kind}: {len(granted)} tokens in {span:.2f}s, {per_taker}")


def arrival_windows(arrivals: list[float], width: float = 1.0) -> int:
    """The most arrivals within any window of width seconds."""
    arrivals = sorted(arrivals)
    most, start = 0, 0
    for end, moment in enumerate(arrivals):
        while moment - arrivals[start] >= width:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.all_databases
def test_three_workers_keep_a_domain_to_its_limit_and_send_every_message_once(
    smtp_app, smtp, db_kind, tmp_path
):
    rate, count = 10.0, 200
    expected = enqueue_many(count)  # each to rcpt@example.com
    arrivals: list[float] = []
    smtp.recorder.on_data = lambda: arrivals.append(time.monotonic())
    routes_file = tmp_path / "routes.toml"
    routes_file.write_text(ROUTES.format(port=smtp.port, rate=rate), encoding="utf-8")
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=0.2, BATCH_SIZE=10,
                     ROUTES=routes_file)  # fmt: skip
    command = [sys.executable, "-m", "outbox", "worker"]
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    workers = []
    for log in logs:
        with log.open("w") as out:
            workers.append(processes.start(command, env=env, stderr=out))
    try:
        wait_until(lambda: len(smtp.received) >= count, timeout=count / rate * 6 + 60)
        time.sleep(0.5)  # anything sent twice would come now
    finally:
        codes = [processes.end(w) for w in workers]
    assert codes == [0, 0, 0], [log.read_text()[-2000:] for log in logs]
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(expected)
    assert max(received.values()) == 1, "a message was sent twice"
    assert statuses() == {Status.SENT: count}
    # Held back is not an attempt: one attempt each, the one that sent it.
    assert db.session.scalar(select(func.count()).select_from(Attempt)) == count
    assert db.session.scalar(select(func.max(Message.attempts))) == 1
    # The tokens keep the limit exactly: in any span of t seconds at most burst + rate * t
    # are let through (the test above). A mail reaches the sink after its token, and a
    # lane (one a worker here) holds at most one bucket's worth let through and not yet
    # sent: a worker the loaded machine stalls just after taking tokens adds at most that
    # to a window when it goes on. So whatever the load, at most rate * t + burst + lanes
    # * burst arrive within t seconds; without such a stall rate * t + burst (the limit's
    # figure, printed; seen exceeded only just after a stall).
    burst, lanes = burst_of(rate), 3
    busiest = {t: arrival_windows(arrivals, t) for t in (1.0, 5.0)}
    span = arrivals[-1] - arrivals[0]
    print(
        f"\n{db_kind}: {count} in {span:.1f}s, at most {busiest[1.0]} in a second "
        f"({rate + burst:g} without a stall), {busiest[5.0]} in 5 seconds"
    )
    for t, most in busiest.items():
        assert most <= rate * t + burst + lanes * burst, (t, most)
    assert count <= rate * span + burst + lanes * burst
