"""Postfix's smtp-sink, a fast C SMTP server for the drain benchmarks, and what it received.

The binary comes from Debian's postfix package without installing the mail server:
`apt-get download postfix` and `dpkg -x` into bench/.cache/postfix, done here on first
use. smtp-sink needs postfix's own shared libraries (libpostfix-*.so in
usr/lib/postfix), so it runs with LD_LIBRARY_PATH pointing there.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache" / "postfix"
BINARY = CACHE / "usr" / "sbin" / "smtp-sink"
LIBS = CACHE / "usr" / "lib" / "postfix"
BACKLOG = 1000  # listen(2) backlog: every worker and ceiling client connects at once
# The -c counters, rewritten after each message with a carriage return.
COUNTER = re.compile(rb"mesg=(\d+)")
MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(<[^>\r\n]*>)", re.IGNORECASE | re.MULTILINE)


def binary() -> Path:
    """The smtp-sink binary, downloaded and unpacked into the cache if missing."""
    if BINARY.exists():
        return BINARY
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        print("fetching smtp-sink: apt-get download postfix", flush=True)
        subprocess.run(["apt-get", "download", "postfix"], cwd=scratch, check=True)
        (deb,) = Path(scratch).glob("postfix_*.deb")
        subprocess.run(["dpkg", "-x", str(deb), str(CACHE)], check=True)
    if not BINARY.exists():
        sys.exit(f"the postfix package holds no {BINARY.relative_to(CACHE)}")
    return BINARY


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Sink:
    """One smtp-sink process on a free loopback port; with record, it dumps every mail.

    The dump is smtp-sink's -D file: each transaction is appended whole, headers first,
    so the Message-ID of each mail can be read back from it.
    """

    def __init__(
        self,
        *,
        record: bool,
        command: str | None = None,
        host: str = "127.0.0.1",
        namespace: str | None = None,
    ) -> None:
        """namespace: a network namespace to run in (ip netns exec), listening on host there."""
        self.host, self.port = host, free_port()
        self.record = record and command is None
        self.folder = Path(tempfile.mkdtemp(prefix="outbox-sink-"))
        self.dump = self.folder / "dump"
        self.output = self.folder / "counters"
        if command is not None:  # someone else's server, e.g. "python -m aiosmtpd -n -l {addr}"
            argv = shlex.split(command.format(addr=f"{self.host}:{self.port}", port=self.port))
            env = dict(os.environ)
        else:
            argv = [str(binary()), "-c"]
            # smtp-sink refuses to run as root without a user to switch to.
            argv += ["-u", "root"] if os.geteuid() == 0 else []
            argv += ["-D", str(self.dump)] if self.record else []
            argv += [f"{self.host}:{self.port}", str(BACKLOG)]
            env = dict(os.environ, LD_LIBRARY_PATH=str(LIBS))
        if namespace is not None:
            argv = ["ip", "netns", "exec", namespace, *argv]
        with self.output.open("wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.counts = command is None
        wait_for_port(self.host, self.port)

    def received(self) -> int | None:
        """How many mails smtp-sink has taken so far (None for another server)."""
        if not self.counts:
            return None
        found = COUNTER.findall(self.output.read_bytes())
        return int(found[-1]) if found else 0

    def message_ids(self) -> Counter[bytes]:
        """How often each Message-ID arrived, read from the dump."""
        with self.dump.open("rb") as dump:
            return Counter(MESSAGE_ID.findall(dump.read()))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        for path in (self.dump, self.output):
            path.unlink(missing_ok=True)
        self.folder.rmdir()

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
