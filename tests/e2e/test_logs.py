"""What outbox's processes log: a quiet idle worker, one line a pass, JSON on request."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox import create_app
from outbox.core import logs
from outbox.core.status import Status
from outbox.models import Message, WorkerBeat, utcnow
from outbox.models.db import db
from tests.support import processes
from tests.support.app import base_config

SUMMARY = re.compile(r"^\S+ \S+ INFO \S+: sent 3, deferred 0, failed 0 in \d+\.\d s$")


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.makeLogRecord(
        {"name": "outbox.worker", "levelno": logging.WARNING, "levelname": "WARNING",
         "msg": message, "args": args}
    )  # fmt: skip
    made.__dict__.update(extra)
    return made


def test_a_json_line_holds_time_level_logger_message_and_the_extra_fields():
    line = logs.JsonFormatter().format(record("%s: took %d", "w1", 3, worker_id="w1"))
    entry = json.loads(line)
    assert entry == {"time": entry["time"], "level": "WARNING", "logger": "outbox.worker",
                     "message": "w1: took 3", "worker_id": "w1"}  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])


def test_a_json_line_is_one_line_with_the_exception_and_any_value():
    try:
        raise RuntimeError("the database\nwent away")
    except RuntimeError:
        failed = record("pass failed:\n%s", "second line", exc_info=sys.exc_info(), when=utcnow())
        failed.exc_info = sys.exc_info()
    line = logs.JsonFormatter().format(failed)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "pass failed:\nsecond line"
    assert (
        entry["exception"].startswith("Traceback")
        and "RuntimeError: the database\nwent" in (entry["exception"])
    )
    assert entry["when"].startswith(str(utcnow().year))  # not JSON itself: its str()


@pytest.mark.parametrize("value", ["xml", "JSON ", ""])
def test_an_unknown_log_format_is_refused_at_start(tmp_path, monkeypatch, value):
    monkeypatch.setenv("OUTBOX_LOG_FORMAT", value)
    with pytest.raises(ValueError, match=r"OUTBOX_LOG_FORMAT\) must be one of text, json"):
        create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}"))


def test_setup_quiets_the_libraries_per_run_lines_and_keeps_an_existing_setup(monkeypatch):
    chatty = [logging.getLogger(name) for name in
              ("apscheduler.scheduler", "apscheduler.executors.default", "mail.log")]  # fmt: skip
    for logger in chatty:
        monkeypatch.setattr(logger, "level", logging.NOTSET)
    before = logging.getLogger().handlers[:]
    logs.setup("json")
    assert logging.getLogger().handlers == before  # pytest's capture stays in charge
    assert [logger.level for logger in chatty] == [logging.WARNING] * 3


def _env(app, smtp, tmp_path: Path, **settings: object) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_MAIL_PORT=str(smtp.port),
               OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com", OUTBOX_POLL_INTERVAL="0.3",
               OUTBOX_COUNT_INTERVAL="0.5")  # fmt: skip
    env.pop("OUTBOX_LOG_FORMAT", None)
    return env | {f"OUTBOX_{k}": str(v) for k, v in settings.items()}


@pytest.fixture
def worker(smtp_app, smtp, tmp_path) -> Iterator:  # type: ignore[no-untyped-def,type-arg]
    """Start `outbox worker` (extra OUTBOX_* settings as keywords); its stderr as a file."""
    started = []

    def start(*args: str, ignore_sigint: bool = False, **settings: object):  # type: ignore[no-untyped-def]
        log = tmp_path / f"worker-{len(started)}.log"
        command = [sys.executable, "-m", "outbox", "worker", *args]
        if ignore_sigint:
            command = ["bash", "-c", "trap '' INT; exec \"$@\"", "bash", *command]
        with log.open("w") as err:
            process = processes.start(command,
                                      env=_env(smtp_app, smtp, tmp_path, **settings),
                                      stderr=err)  # fmt: skip
        started.append(process)
        return process, log

    yield start
    for process in started:
        processes.kill_group(process)


def _beats(since: int) -> None:
    """Wait until the worker's heartbeat has moved since more times (one a pass)."""
    seen: set[object] = set()
    deadline = time.monotonic() + processes.START_TIMEOUT
    while len(seen) <= since:
        assert time.monotonic() < deadline, "the worker did not tick"
        seen.add(db.session.execute(sa.select(sa.func.max(WorkerBeat.last_seen_at))).scalar())
        db.session.commit()
        seen.discard(None)
        time.sleep(0.05)


def _lines(log: Path, wanted: str, process) -> list[str]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + processes.START_TIMEOUT
    while wanted not in log.read_text():
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()
        time.sleep(0.05)
    return log.read_text().splitlines()


def _sent(count: int) -> None:
    deadline = time.monotonic() + processes.START_TIMEOUT
    while db.session.scalar(sa.select(sa.func.count()).where(Message.status == Status.SENT)) != (
        count
    ):
        db.session.commit()
        assert time.monotonic() < deadline, "the worker did not send"
        time.sleep(0.05)
    db.session.commit()


def test_an_idle_worker_logs_nothing_and_a_pass_that_sent_logs_one_line(worker, make_message):
    process, log = worker()
    started = _lines(log, "polling every", process)
    _beats(3)  # three passes, and the counts' job ran beside them
    assert log.read_text().splitlines() == started, "an idle worker logged"
    # Due all at once, so one pass sends them all.
    due = utcnow() + timedelta(seconds=1)
    for n in range(3):
        make_message(subject=f"n{n}", send_after=due)
    _sent(3)
    _beats(2)
    lines = log.read_text().splitlines()
    assert len(lines) == len(started) + 1, lines
    assert SUMMARY.match(lines[-1]), lines[-1]
    assert processes.end(process, signal.SIGTERM) == 0
    assert log.read_text().splitlines()[-1].endswith(": stopped")


def test_a_json_worker_writes_one_object_a_line_with_its_worker_id(worker, make_message):
    process, log = worker(LOG_FORMAT="json")
    _lines(log, "polling every", process)
    make_message()
    _sent(1)
    _beats(1)
    assert processes.end(process, signal.SIGTERM) == 0
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    messages = [e["message"].split(": ", 1)[1] for e in entries]
    assert messages[0].startswith("polling every 0.3s")
    assert re.fullmatch(r"sent 1, deferred 0, failed 0 in \d+\.\d s", messages[1])
    assert messages[2:] == ["SIGTERM received, stopping", "stopped"]
    assert {e["logger"] for e in entries} == {"outbox.worker"}
    assert {e["level"] for e in entries} == {"INFO"}
    assert {e["worker_id"] for e in entries} == {entries[0]["message"].split(": ")[0]}


def _signals(pid: int, field: str) -> int:
    """A mask from /proc/PID/status: SigIgn (ignored), SigCgt (caught), SigBlk (blocked)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith(f"{field}:")).split()[1], 16)


SIGINT_BIT = 1 << (signal.SIGINT - 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("args", [(), ("--processes", "2")])
def test_a_worker_started_with_sigint_ignored_still_stops_on_it(worker, args):
    # What `outbox worker &` in a script, or `make test &`, hands it: SIGINT ignored.
    process, log = worker(*args, ignore_sigint=True)
    _lines(log, "polling every", process)
    if args:
        deadline = time.monotonic() + processes.START_TIMEOUT
        while log.read_text().count("polling every") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    assert len(children) == (2 if args else 0)
    for pid in [process.pid, *map(int, children)]:
        assert not _signals(pid, "SigIgn") & SIGINT_BIT, "SIGINT still ignored"
        assert _signals(pid, "SigCgt") & SIGINT_BIT, "no SIGINT handler of its own"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0, log.read_text()
    assert "SIGINT received, stopping" in log.read_text()
    if args:
        assert "worker processes stopped: exit codes [0, 0]" in log.read_text()
        assert log.read_text().count(": stopped") == 2
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)


def test_the_web_app_logs_its_own_warnings_in_the_log_format(tmp_path):
    """Under gunicorn nothing else sets up logging: create_app does, in LOG_FORMAT."""
    script = (
        "import logging\nfrom outbox import create_app\ncreate_app()\n"
        "logging.getLogger('outbox.drivers').warning('the database went away')\n"
    )
    env = {**os.environ, "OUTBOX_INSTANCE_PATH": str(tmp_path), "OUTBOX_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["the database went away"]
    assert json.loads(lines[0])["level"] == "WARNING"
