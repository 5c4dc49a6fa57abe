"""A real Postfix as a test server, and the fixtures for it and for smtp-sink.

The servers and what they yield are described in tests/support/smtp_sink.py. A server that
cannot be started skips its test, and fails it under CI (CI=true).
"""

import os
import shutil
import smtplib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import processes
from .smtp_sink import (
    NOBODY,
    SMTP_SINK,
    Delivered,
    SmtpSink,
    ask_ehlo,
    bare,
    own_directory,
    split_trace,
    wait_until,
)
from .smtpd import free_port

__all__ = ["postfix_relay", "postfix_smtpd", "postfix_smtpd_7bit", "smtp_sink", "smtp_sink_7bit"]

POSTFIX = "/usr/sbin/postfix"
QUEUES = ("maildrop", "incoming", "active", "deferred", "hold")


@dataclass(frozen=True)
class Smarthost:
    """A server Postfix relays everything to, over STARTTLS and with SASL AUTH (a login)."""

    host: str
    port: int
    login: str
    password: str
    ca_file: Path


def unavailable(reason: str) -> None:
    """Skip the test, or fail it under CI, where no server may be silently missing."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class Postfix:
    """A real Postfix (master, smtpd, cleanup, qmgr, ...) with a config and queue of its own.

    It takes mail for any domain and delivers each recipient's copy to one Maildir with
    virtual(8); with relay_to it sends everything on over SMTP to that smtp-sink instead,
    and delivered() gives what reached the sink. The first is a receiving MX, the second
    a relay (its smtp client splits lines over smtp_line_length_limit, 998). With
    smarthost it relays to that server as a smarthost does: STARTTLS, AUTH, and at most
    smtp_destination_recipient_limit (50) recipients a transaction.
    """

    def __init__(self, *, eight_bit: bool = True, smtputf8: bool = True,
                 relay_to: SmtpSink | None = None,
                 smarthost: Smarthost | None = None) -> None:  # fmt: skip
        if os.geteuid() != 0:
            unavailable("a Postfix instance needs root to start")
        self.host, self.port = "127.0.0.1", free_port()
        self.relay_to, self.smarthost = relay_to, smarthost
        self.root = own_directory("outbox-postfix-")
        self.config = self.root / "conf"
        self.queue = self.root / "queue"
        self.maildir = self.root / "mail" / "all"
        for path in (self.config, self.queue, self.root / "data", self.root / "mail"):
            path.mkdir()
        shutil.chown(self.root / "data", "postfix")
        os.chown(self.root / "mail", NOBODY, NOBODY)
        (self.config / "main.cf").write_text(self.main_cf(eight_bit, smtputf8))
        (self.config / "master.cf").write_text(MASTER_CF.format(port=self.port))
        for path in self.config.iterdir():  # postfix waits for a config file to be 2 s old
            os.utime(path, (time.time() - 60,) * 2)
        try:
            self.postfix("start")
            self.ehlo = ask_ehlo(self.port, time.monotonic() + processes.START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def main_cf(self, eight_bit: bool, smtputf8: bool) -> str:
        settings = {
            "compatibility_level": "3.6",
            "queue_directory": self.queue,
            "data_directory": self.root / "data",
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": "postfix.test",
            "mydestination": "",
            "inet_interfaces": self.host,
            "inet_protocols": "ipv4",
            "mynetworks": "127.0.0.0/8",
            "smtputf8_enable": "yes" if smtputf8 else "no",
            "smtpd_discard_ehlo_keywords": "" if eight_bit else "8bitmime",
            # Rewrite no header of mail from this client, as an MX does for mail from
            # outside (the default rewrites for loopback clients, as for local submission).
            "local_header_rewrite_clients": "",
            "message_size_limit": "52428800",
            "virtual_mailbox_limit": "0",
            "maillog_file": self.root / "maillog",
            "maillog_file_prefixes": self.root,
            "alias_maps": "",
            "biff": "no",
        }
        if self.smarthost is not None:
            relay = self.smarthost
            settings.update({
                "relayhost": f"[{relay.host}]:{relay.port}",
                "smtpd_relay_restrictions": "permit_mynetworks, reject",
                "smtp_tls_security_level": "encrypt",
                "smtp_tls_CAfile": relay.ca_file,
                "smtp_sasl_auth_enable": "yes",
                "smtp_sasl_password_maps": f"static:{relay.login}:{relay.password}",
                "smtp_sasl_security_options": "noanonymous",  # PLAIN, as over TLS it may
            })  # fmt: skip
        elif self.relay_to is None:
            settings.update({
                "virtual_mailbox_domains": "static:all",
                "virtual_mailbox_base": self.root / "mail",
                "virtual_mailbox_maps": "static:all/",  # one Maildir for every recipient
                "virtual_uid_maps": f"static:{NOBODY}",
                "virtual_gid_maps": f"static:{NOBODY}",
            })  # fmt: skip
        else:
            settings["relayhost"] = f"[{self.relay_to.host}]:{self.relay_to.port}"
            settings["smtpd_relay_restrictions"] = "permit_mynetworks, reject"
        return "".join(f"{name} = {value}\n" for name, value in settings.items())

    def postfix(self, command: str) -> str:
        """Run postfix -c <config> command; its output, or RuntimeError if it failed.

        The output goes to a file: the master it starts would hold a pipe open.
        """
        out = self.root / f"postfix-{command}.out"
        with out.open("w") as sink:
            done = subprocess.run([POSTFIX, "-c", str(self.config), command], stdout=sink,
                                  stderr=subprocess.STDOUT, timeout=30, check=False)  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"postfix {command} failed: {out.read_text()}\n{self.log()}")
        return out.read_text()

    def log(self) -> str:
        path = self.root / "maillog"
        return path.read_text(errors="replace") if path.exists() else "(no maillog)"

    def stop(self) -> None:
        """postfix stop, then wait for the port to close."""
        if (self.queue / "pid" / "master.pid").exists():
            self.postfix("stop")  # returns once the master has ended
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                smtplib.SMTP(self.host, self.port, timeout=1).close()
            except OSError:
                break
            time.sleep(0.02)
        shutil.rmtree(self.root, ignore_errors=True)

    def _queue_empty(self) -> bool:
        deferred = list((self.queue / "deferred").rglob("*"))
        if any(path.is_file() for path in deferred):
            raise AssertionError(f"Postfix deferred a mail:\n{self.log()}")
        return not any(path.is_file() for name in QUEUES for path in (self.queue / name).rglob("*"))

    def drained(self, timeout: float = 30.0) -> None:
        """Wait until Postfix has handed on every mail (AssertionError if it deferred one)."""
        try:
            wait_until(lambda: True if self._queue_empty() else None, timeout, "Postfix's queue")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    @property
    def received(self) -> list[Delivered]:
        """Every copy delivered so far, one per recipient, in the order they were written."""
        if self.relay_to is not None:
            return self.relay_to.received
        if not (self.maildir / "new").exists():
            return []
        files = sorted((self.maildir / "new").iterdir(),
                       key=lambda path: (path.stat().st_mtime_ns, path.name))  # fmt: skip
        return [self.read(path.read_bytes()) for path in files]

    def delivered(self, count: int | None = None, timeout: float = 10.0) -> list[Delivered]:
        """Wait until Postfix's queue is empty (and count copies are in), then every copy."""

        def ready() -> list[Delivered] | None:
            if not self._queue_empty():
                return None
            if self.relay_to is not None:
                return self.relay_to.delivered(count, timeout)
            mails = self.received
            return mails if count is None or len(mails) >= count else None

        try:
            return wait_until(ready, timeout, f"{count or 'all'} mails through Postfix")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    @staticmethod
    def read(raw: bytes) -> Delivered:
        fields, content = split_trace(raw, (b"return-path", b"x-original-to", b"delivered-to"))
        rcpts = [bare(rcpt) for rcpt in fields[b"x-original-to"]]
        return Delivered(bare(fields[b"return-path"][0]), rcpts, content, raw)


# Only the services this instance uses, none chrooted (the queue has no copy of /etc).
MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
cleanup   unix n - n - 0 cleanup
qmgr      unix n - n 300 1 qmgr
rewrite   unix - - n - - trivial-rewrite
bounce    unix - - n - 0 bounce
defer     unix - - n - 0 bounce
trace     unix - - n - 0 bounce
verify    unix - - n - 1 verify
flush     unix n - n 1000? 0 flush
proxymap  unix - - n - - proxymap
smtp      unix - - n - - smtp
tlsmgr    unix - - n 1000? 1 tlsmgr
relay     unix - - n - - smtp
showq     unix n - n - - showq
error     unix - - n - - error
retry     unix - - n - - error
discard   unix - - n - - discard
virtual   unix - n n - - virtual
anvil     unix - - n - 1 anvil
scache    unix - - n - 1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


def require(binary: str) -> None:
    """Skip (fail under CI) when Debian's postfix package is not installed."""
    if not os.access(binary, os.X_OK):
        unavailable(f"{binary} is not installed (apt-get install postfix)")


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    """smtp-sink offering PIPELINING and 8BITMIME (never SMTPUTF8), keeping every mail."""
    require(SMTP_SINK)
    server = SmtpSink()
    yield server
    server.stop()


@pytest.fixture
def smtp_sink_7bit() -> Iterator[SmtpSink]:
    """smtp-sink offering PIPELINING, without 8BITMIME or SMTPUTF8.

    It still takes BODY=8BITMIME, SMTPUTF8 and 8-bit data: a test looks at the bytes.
    """
    require(SMTP_SINK)
    server = SmtpSink(eight_bit=False)
    yield server
    server.stop()


@pytest.fixture
def postfix_smtpd() -> Iterator[Postfix]:
    """A real Postfix offering PIPELINING, 8BITMIME and SMTPUTF8, delivering to a Maildir."""
    require(POSTFIX)
    server = Postfix()
    yield server
    server.stop()


@pytest.fixture
def postfix_smtpd_7bit() -> Iterator[Postfix]:
    """A real Postfix offering PIPELINING without 8BITMIME (hidden) or SMTPUTF8 (off).

    It refuses the SMTPUTF8 parameter (555) but still takes BODY=8BITMIME, 8-bit data and
    UTF-8 addresses: a test looks at the bytes.
    """
    require(POSTFIX)
    server = Postfix(eight_bit=False, smtputf8=False)
    yield server
    server.stop()


@pytest.fixture
def postfix_relay(smtp_sink: SmtpSink) -> Iterator[Postfix]:
    """A real Postfix relaying every mail over SMTP to smtp_sink; delivered() reads the sink."""
    require(POSTFIX)
    server = Postfix(relay_to=smtp_sink)
    yield server
    server.stop()
