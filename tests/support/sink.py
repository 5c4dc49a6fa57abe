"""An SMTP sink in a process of its own that appends each Message-ID it accepts to a file.

The soak tests send tens of thousands of mails; an aiosmtpd server inside pytest
would share its interpreter lock with the test. Run as
`python -m tests.support.sink PORT FILE [DELAY]`: it prints "ready" once it listens, writes one
Message-ID a line (flushed before it answers 250), waiting DELAY seconds first
when given, and stops on SIGTERM.
"""

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO

from aiosmtpd.smtp import SMTP

MESSAGE_ID = re.compile(rb"^Message-ID:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


class Appender:
    """aiosmtpd handler: one line per accepted message, written before the 250."""

    def __init__(self, out: IO[str], delay: float) -> None:
        self.out, self.delay = out, delay

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802
        # Offer PIPELINING, as Postfix and most servers do: the worker then sends
        # MAIL, RCPT and DATA in one write, the path production mail takes.
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        if self.delay:
            await asyncio.sleep(self.delay)
        head = envelope.original_content.split(b"\r\n\r\n", 1)[0]
        found = MESSAGE_ID.search(head)
        self.out.write((found.group(1).decode() if found else "<none>") + "\n")
        self.out.flush()
        return "250 OK queued"


def serve(port: int, path: str, delay: float) -> None:
    loop = asyncio.new_event_loop()
    with open(path, "a", encoding="ascii") as out:
        handler = Appender(out, delay)
        server = loop.run_until_complete(
            loop.create_server(
                lambda: SMTP(handler, hostname="sink", loop=loop),
                host="127.0.0.1",
                port=port,
                reuse_address=True,
            )
        )
        loop.add_signal_handler(signal.SIGTERM, loop.stop)
        print("ready", flush=True)
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
    loop.close()


class Sink:
    """Starts and stops the sink process on one port; reads what it recorded."""

    def __init__(self, port: int, path: Path, delay: float = 0.0) -> None:
        self.port, self.path, self.delay = port, path, delay
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> "Sink":
        command = [sys.executable, "-m", "tests.support.sink", str(self.port), str(self.path)]
        command.append(str(self.delay))
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "ready", f"sink did not start: {line!r}"
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.communicate(timeout=10)
            self.process = None

    def message_ids(self) -> Counter[str]:
        if not self.path.exists():
            return Counter()
        return Counter(self.path.read_text(encoding="ascii").split())

    def count(self) -> int:
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 16), b""))

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"sink got {self.count()} of {count} in {timeout:g}s")
            time.sleep(0.05)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
