"""Helpers for the soak tests: sizes, worker processes, the SMTP sink and the summary line.

Each soak test has a short version that runs in `make test` and a long one chosen by
OUTBOX_SOAK=1 (`make soak`).
"""

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa

from outbox.core.status import Status
from outbox.models import Attempt, Message, utcnow
from outbox.models.db import db

from . import processes
from .sink import Sink
from .smtpd import free_port
from .workers import OUTBOX, worker_env

SOAK = os.environ.get("OUTBOX_SOAK") == "1"
T = TypeVar("T")
ON_MARIADB = [pytest.param("mariadb", marks=pytest.mark.mariadb)]
ON_SERVERS = [*ON_MARIADB, pytest.param("postgres", marks=pytest.mark.postgres)]


def size(long: T, short: T) -> T:
    """The long figure under OUTBOX_SOAK=1, else the short one."""
    return long if SOAK else short


@pytest.fixture(name="sink")
def sink_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sink]:
    """An SMTP sink process on a free port, recording into tmp_path.

    Parametrized indirectly, the parameter is a delay in seconds before each 250.
    """
    delay = getattr(request, "param", 0.0)
    sink = Sink(free_port(), tmp_path / "received.txt", delay).start()
    yield sink
    sink.stop()


@dataclass
class Summary:
    """The figures one scenario prints on a line of its own."""

    scenario: str
    messages: int
    workers: int
    kills: int = 0
    duplicates: int = 0
    lost: int = 0
    elapsed: float = 0.0
    more: str = ""  # what else the scenario counted

    def show(self) -> None:
        rate = self.messages / self.elapsed if self.elapsed else 0.0
        print(
            f"\nSOAK {self.scenario}: messages {self.messages}, workers {self.workers}, "
            f"kills {self.kills}, duplicates {self.duplicates}, lost {self.lost}, "
            f"elapsed {self.elapsed:.1f}s, {rate:.0f} msgs/s"
            + (f"; {self.more}" if self.more else ""),
            flush=True,
        )


def tally(expected: list[str], received: Counter[str]) -> tuple[int, int]:
    """(duplicates, lost) of what the sink got against what was queued; nothing unknown."""
    assert set(received) <= set(expected), "the sink got a message nobody queued"
    duplicates = sum(n - 1 for n in received.values())
    return duplicates, len(set(expected) - set(received))


class Workers:
    """Worker processes with OUTBOX_* settings, each logging to a file of its own."""

    def __init__(self, app, sink: Sink, tmp_path: Path, **settings: object) -> None:  # type: ignore[no-untyped-def]
        self.env = worker_env(app, sink, tmp_path, **settings)
        self.logs = tmp_path / "logs"
        self.logs.mkdir(exist_ok=True)
        self.running: list[subprocess.Popen[str]] = []
        self.started: list[subprocess.Popen[str]] = []

    def start(self, command: str = "worker") -> subprocess.Popen[str]:
        with open(self.logs / f"{len(self.started)}.log", "w") as log:
            process = processes.start(
                [*OUTBOX, command], env=self.env, stdout=subprocess.PIPE, stderr=log, text=True
            )
        self.started.append(process)
        self.running.append(process)
        return process

    def log(self, process: subprocess.Popen[str]) -> str:
        return (self.logs / f"{self.started.index(process)}.log").read_text()

    def kill(self, process: subprocess.Popen[str]) -> None:
        processes.kill_group(process)
        self.running.remove(process)

    def stop(self, process: subprocess.Popen[str], timeout: float = 60) -> int:
        """SIGTERM, once the worker has said it is polling; wait; the exit code."""
        # Before its signal handlers are in place, SIGTERM would just end the process.
        deadline = time.monotonic() + timeout
        while "polling every" not in self.log(process) and process.poll() is None:
            assert time.monotonic() < deadline, "the worker never started polling"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=timeout)
        code = process.returncode
        self.running.remove(process)
        return code

    def finish(self, timeout: float) -> list[str]:
        """Wait for every send-queued process; their outputs."""
        outputs = [p.communicate(timeout=timeout)[0] for p in self.running]
        for process in self.running:
            assert process.returncode == 0, self.log(process)[-3000:]
        self.running.clear()
        return outputs

    def rescue(self) -> str:
        """One send-queued pass, after every other worker has gone."""
        assert not self.running
        done = subprocess.run(
            [*OUTBOX, "send-queued"], env=self.env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:
        for process in list(self.running):
            self.kill(process)


@pytest.fixture(name="workers")
def workers_fixture() -> Iterator[list[Workers]]:
    """Pools made in a test; whatever they still run is killed at the end."""
    pools: list[Workers] = []
    yield pools
    for pool in pools:
        pool.close()


def outcomes() -> Counter[str]:
    """Attempts per outcome."""
    rows = db.session.execute(sa.select(Attempt.outcome, sa.func.count()).group_by(Attempt.outcome))
    counts = Counter(dict(rows.all()))
    db.session.commit()
    return counts


def overdue_claims(lock_timeout: float) -> int:
    """Messages held in sending past lock_timeout."""
    cutoff = utcnow() - timedelta(seconds=lock_timeout)
    stmt = sa.select(sa.func.count()).where(
        Message.status == Status.SENDING.value, Message.locked_at < cutoff
    )
    found = db.session.execute(stmt).scalar_one()
    db.session.commit()
    return found
