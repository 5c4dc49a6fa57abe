"""wrk, a load generator in C, posting prepared request bodies for bench/enqueue.py.

wrk comes from PATH, or else from Debian's package without installing it: `apt-get
download wrk libluajit-5.1-2` and `dpkg -x` into bench/.cache/wrk (its LuaJIT library
found there through LD_LIBRARY_PATH). None of that works: located() says why, and
enqueue.py falls back to its Python clients.

Each wrk thread has one connection and posts the bodies of one share file in turn
(enqueue.lua); wrk itself knows only a duration, so the run is given an hour and woken
with SIGINT once every thread has finished its share.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "enqueue.lua"
CACHE = HERE / ".cache" / "wrk"
CACHED = CACHE / "usr" / "bin" / "wrk"
LIBS = CACHE / "usr" / "lib" / "x86_64-linux-gnu"


def located() -> tuple[Path | None, str]:
    """The wrk binary, fetched into the cache if missing; or None and what went wrong."""
    found = shutil.which("wrk")
    if found:
        return Path(found), ""
    if CACHED.exists():
        return CACHED, ""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        print("fetching wrk: apt-get download wrk libluajit-5.1-2", flush=True)
        try:
            subprocess.run(["apt-get", "download", "wrk", "libluajit-5.1-2"], cwd=scratch,
                           check=True, capture_output=True, timeout=120)  # fmt: skip
            for deb in Path(scratch).glob("*.deb"):
                subprocess.run(["dpkg", "-x", str(deb), str(CACHE)], check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"wrk is not on PATH and apt-get download failed ({exc})"
    return (CACHED, "") if CACHED.exists() else (None, "the wrk package holds no usr/bin/wrk")


@dataclass
class Seen:
    """What the wrk threads saw, from enqueue.lua's outcome file."""

    statuses: Counter[int] = field(default_factory=Counter)
    ids: list[int] = field(default_factory=list)  # message ids of the 201 answers
    errors: int = 0  # requests without an answer: connect, read, write errors, timeouts
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50, p99, max
    seconds: float = 0.0  # from the start until the last thread finished
    cpu: float = 0.0  # wrk's own user and system time


def run(binary: Path, url: str, path: str, headers: list[str], bodies: list[list[bytes]]) -> Seen:
    """Post each list of bodies over a connection of its own; what came back."""
    with tempfile.TemporaryDirectory(prefix="outbox-wrk-") as folder:
        for n, share in enumerate(bodies, 1):
            Path(folder, f"share-{n}.jsonl").write_bytes(b"\n".join(share) + b"\n")
        connections = str(len(bodies))
        command = [str(binary), "-t", connections, "-c", connections, "-d", "1h",
                   "--timeout", "60s", "-s", str(SCRIPT), *[a for h in headers for a in ("-H", h)],
                   url, "--", path, folder]  # fmt: skip
        env = {**os.environ, "LD_LIBRARY_PATH": str(LIBS)} if binary == CACHED else None
        began = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
        seconds = _wait_for_threads(process.pid) - began
        usage = None
        while usage is None:  # the main thread sleeps out -d; SIGINT ends that
            os.kill(process.pid, signal.SIGINT)
            time.sleep(0.05)
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            usage = usage if pid else None
        process.returncode = os.waitstatus_to_exitcode(status)
        seen = _read(Path(folder, "outcome.txt"))
    seen.seconds = seconds
    seen.cpu = usage.ru_utime + usage.ru_stime
    if process.returncode != 0:
        seen.errors += 1
        print(f"  wrk exited with {process.returncode}")
    return seen


def _wait_for_threads(pid: int) -> float:
    """Wait until wrk's threads have started and all ended again; the moment they had."""
    tasks = Path(f"/proc/{pid}/task")
    started = False
    while True:
        try:
            count = len(os.listdir(tasks))
        except FileNotFoundError:  # wrk exited (an error, or a run shorter than a poll)
            return time.perf_counter()
        started = started or count > 1
        if started and count == 1:
            return time.perf_counter()
        time.sleep(0.005)


def _read(path: Path) -> Seen:
    seen = Seen()
    if not path.exists():
        return seen
    for line in path.read_text().splitlines():
        kind, *values = line.split()
        if kind == "id":
            seen.ids.append(int(values[0]))
        elif kind == "status":
            seen.statuses[int(values[0])] += int(values[1])
        elif kind == "errors":
            seen.errors = int(values[0])
        elif kind == "latency":  # microseconds
            seen.latency_ms[values[0]] = float(values[1]) / 1000
    return seen
