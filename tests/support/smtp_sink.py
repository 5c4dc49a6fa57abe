"""smtp-sink as a test server, and what the file-keeping servers of tests/support/postfix.py share.

Each server is a process of the test's own on a free 127.0.0.1 port, and has the
attributes a round-trip test needs whatever the server: `host`, `port`, `ehlo` (the
keywords it answered EHLO with, upper case, asked when it started), `received` (the
mails stored so far) and `delivered(count=None, timeout=10.0)`, which waits until every
mail the server has taken is stored and returns them all as `Delivered` (a
`smtpd.Received`: mail_from, rcpt_tos, content; plus `raw`, the file as the server wrote
it). `content` is the message as the client sent it, as far as the stored file tells:
CRLF line ends, dots unstuffed, the server's own trace lines removed. Both servers store
lines with LF, so a bare CR or LF the client sent cannot be told from a line end here.
"""

import os
import shutil
import smtplib
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import processes
from .smtpd import Received, free_port

SMTP_SINK = "/usr/sbin/smtp-sink"
NOBODY = 65534  # smtp-sink and virtual(8) write their files as nobody
# The fields smtp-sink writes before each mail it keeps (then a Received field).
SINK_FIELDS = (b"x-client-addr", b"x-client-proto", b"x-helo-args", b"x-mail-args",
               b"x-rcpt-args")  # fmt: skip


@dataclass
class Delivered(Received):
    raw: bytes = b""  # the stored file as the server wrote it (LF line ends)


def own_directory(prefix: str) -> Path:
    """A fresh directory the server's unprivileged processes can enter (pytest's are 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def ask_ehlo(port: int, deadline: float) -> frozenset[str]:
    """The EHLO keywords of the server on port, trying until it answers or deadline passes."""
    while True:
        try:
            with smtplib.SMTP("127.0.0.1", port, timeout=2) as client:
                code, _ = client.ehlo("outbox.test")
                if code == 250:
                    return frozenset(name.upper() for name in client.esmtp_features)
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


def wait_until(ready, timeout: float, what: str):  # type: ignore[no-untyped-def]
    """Poll ready() until it gives something other than None; AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while (result := ready()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
    return result


def split_trace(raw: bytes, names: tuple[bytes, ...]) -> tuple[dict[bytes, list[bytes]], bytes]:
    """Take the server's leading trace fields (names, then one Received) off a stored mail.

    Returns the fields by lower-case name and the rest with CRLF line ends.
    """
    lines = raw.split(b"\n")
    fields: dict[bytes, list[bytes]] = {}
    while lines and lines[0].split(b":", 1)[0].lower() in names:
        name, value = lines.pop(0).split(b":", 1)
        fields.setdefault(name.lower(), []).append(value.strip())
    if lines and lines[0].lower().startswith(b"received:"):
        lines.pop(0)
        while lines and lines[0][:1] in (b" ", b"\t"):
            lines.pop(0)
    return fields, b"\r\n".join(lines)


def bare(address: bytes) -> str:
    """The address of a path as a server logs it: <a@b> PARAM=x -> a@b."""
    path = address.split(b" ", 1)[0].decode("utf-8", "surrogateescape")
    return path.removeprefix("<").removesuffix(">")


class SmtpSink:
    """/usr/sbin/smtp-sink writing each mail to a file of its own (-d)."""

    def __init__(self, eight_bit: bool = True) -> None:
        self.host, self.port = "127.0.0.1", free_port()
        self.root = own_directory("outbox-smtp-sink-")
        self.dumps = self.root / "mail"
        self.dumps.mkdir()
        os.chown(self.dumps, NOBODY, -1)
        # -u: smtp-sink run as root must drop to a user; -8: no 8BITMIME. This
        # smtp-sink (Postfix 3.7) never offers SMTPUTF8 and has no switch for it.
        args = [SMTP_SINK, "-u", "nobody", "-h", "smtp-sink.test", "-d", f"{self.dumps}/%s."]
        args += [] if eight_bit else ["-8"]
        with (self.root / "stderr").open("wb") as stderr:
            self.process = subprocess.Popen([*args, f"{self.host}:{self.port}", "64"],
                                            stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
        try:
            self.ehlo = ask_ehlo(self.port, time.monotonic() + processes.START_TIMEOUT)
        except OSError as exc:
            problem = (self.root / "stderr").read_text(errors="replace")
            self.stop()
            raise RuntimeError(f"smtp-sink did not answer: {problem}") from exc

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def _open_files(self) -> set[str]:
        fds = Path(f"/proc/{self.process.pid}/fd")
        return {os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()}

    @property
    def received(self) -> list[Delivered]:
        """Every mail whose transaction has ended, in the order they were finished."""
        busy = self._open_files()
        files = [path for path in self.dumps.iterdir() if str(path) not in busy]
        files.sort(key=lambda path: (path.stat().st_mtime_ns, path.name))
        return [self.read(path.read_bytes()) for path in files]

    def delivered(self, count: int | None = None, timeout: float = 10.0) -> list[Delivered]:
        """Wait until no transaction is open (and count mails are in), then all mails."""

        def ready() -> list[Delivered] | None:
            if any(path.startswith(str(self.dumps)) for path in self._open_files()):
                return None
            mails = self.received
            return mails if count is None or len(mails) >= count else None

        return wait_until(ready, timeout, f"{count or 'all'} mails at smtp-sink")

    @staticmethod
    def read(raw: bytes) -> Delivered:
        fields, content = split_trace(raw, SINK_FIELDS)
        content = content.removesuffix(b"\r\n")  # smtp-sink ends each mail with an empty line
        rcpts = [bare(rcpt) for rcpt in fields.get(b"x-rcpt-args", [])]
        return Delivered(bare(fields[b"x-mail-args"][0]), rcpts, content, raw)
