"""Processes the tests start: each leads a process group, and the whole group is ended.

A test that stops a process with a signal and waits may time out, and a process that
starts others (`outbox worker --processes`, gunicorn) may leave them behind; killing
the group at the end leaves nothing running for the next test, or after the run.
SIGINT is passed on as the tests got it: under `make test &` in a script it is ignored,
and what outbox does then is what those runs test.
"""

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

# Seconds a process or server the tests start may take to answer, or a worker to make its
# first pass: a guard against a hang, never a wait, so it is sized for a loaded machine,
# where an outbox start (about 3 s of CPU: Flask, SQLAlchemy, the app) takes many times that.
START_TIMEOUT = 180.0


def start(command: list[str], **options: Any) -> subprocess.Popen:  # type: ignore[type-arg]
    """Popen in a process group of its own, which kill_group() ends."""
    return subprocess.Popen(command, process_group=0, **options)


def end(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:  # type: ignore[type-arg]
    """Send sig, wait up to timeout; then SIGKILL whatever is left of the group. The exit code.

    None if the process had to be killed.
    """
    code = None
    try:
        if process.poll() is None:
            process.send_signal(sig)
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        kill_group(process)
    return code


def kill_group(process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """SIGKILL every process left in the group process leads, and reap process."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream:
            stream.close()


@contextlib.contextmanager
def group(command: list[str], **options: Any) -> Iterator[subprocess.Popen]:  # type: ignore[type-arg]
    """start(), and at the end kill_group() whatever the test did."""
    process = start(command, **options)
    try:
        yield process
    finally:
        kill_group(process)
