"""A real Dovecot IMAP server for the tests: its own config, TLS certificate and mailbox.

Debian's dovecot-imapd, started in the foreground with a configuration written for the
test: IMAPS (and plain IMAP, for the opt-out) on free loopback ports, a certificate from a
trustme CA, one user whose mail lives in a Maildir of the test's own. The package's own
instance is never touched. Missing Dovecot skips the test, and fails it under CI.
"""

import os
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import trustme

from . import processes
from .smtp_sink import own_directory
from .smtpd import free_port

DOVECOT = "/usr/sbin/dovecot"
USER, PASSWORD = "bounces", "s3cret /@?#%"  # a password that needs quoting in a URL
MAIL_UID = 65534  # nobody: Dovecot runs no mail process as root

CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{root}/cert.pem
ssl_key = <{root}/key.pem
ssl_dh = </usr/share/dovecot/dh.pem
disable_plaintext_auth = no
auth_mechanisms = plain login
first_valid_uid = {uid}
default_login_user = dovenull
default_internal_user = dovecot
mail_location = maildir:{root}/mail/%u
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={uid} home={root}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = {imaps_port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
"""


@dataclass
class Dovecot:
    """A running Dovecot: where it listens, the user, and the CA its certificate is from."""

    root: Path
    imaps_port: int
    imap_port: int
    ca_file: Path

    def url(self, folder: str = "INBOX", scheme: str = "imaps") -> str:
        """OUTBOX_BOUNCE_IMAP_URL for the user's folder."""
        port = self.imaps_port if scheme == "imaps" else self.imap_port
        return f"{scheme}://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/{quote(folder)}"

    def client(self):  # type: ignore[no-untyped-def]
        """An imapclient session as the user, TLS checked against the test CA."""
        from imapclient import IMAPClient

        context = ssl.create_default_context(cafile=str(self.ca_file))
        client = IMAPClient("127.0.0.1", self.imaps_port, ssl=True, ssl_context=context)
        client.login(USER, PASSWORD)
        return client

    def deliver(self, *mails: bytes, folder: str = "INBOX") -> None:
        """Put mails in a folder, as the mail server in front would (IMAP APPEND)."""
        with self.client() as client:
            for mail in mails:
                client.append(folder, mail)

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _wait_for(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"* OK"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    if not os.access(DOVECOT, os.X_OK):
        _unavailable("Dovecot is not installed (apt-get install dovecot-imapd)")
    if os.geteuid() != 0:
        _unavailable("a Dovecot instance needs root to start")
    root = own_directory("outbox-dovecot-")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(root / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    (root / "passwd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
    (root / "mail").mkdir()
    os.chown(root / "mail", MAIL_UID, MAIL_UID)
    server = Dovecot(root, free_port(), free_port(), root / "ca.pem")
    (root / "dovecot.conf").write_text(CONFIG.format(root=root, uid=MAIL_UID,
        imap_port=server.imap_port, imaps_port=server.imaps_port))  # fmt: skip
    process = processes.start([DOVECOT, "-F", "-c", str(root / "dovecot.conf")])
    try:
        # The IMAP port, not IMAPS: IMAPS greets only after TLS.
        if not _wait_for(server.imap_port, time.monotonic() + processes.START_TIMEOUT):
            pytest.fail(f"Dovecot did not start:\n{server.log()}")
        yield server
    finally:
        processes.end(process)
        shutil.rmtree(root, ignore_errors=True)
