"""The whole loop with a real Postfix: it takes the mail, the next hop refuses a recipient,
Postfix writes its own bounce and hands it to `outbox bounces --listen`."""

import time
from dataclasses import dataclass

import pytest
from sqlalchemy import select

from outbox.core.status import Status
from outbox.models import BounceMail
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.bouncemail import BOUNCES
from tests.support.postfix import POSTFIX, Postfix, require
from tests.support.rows import fresh, states

OK, GONE = "ok@example.org", "gone@example.org"


@dataclass
class Hop:
    host: str
    port: int


class BouncingPostfix(Postfix):
    """A Postfix relaying to the next hop, with mail for the bounce domain sent to outbox."""

    def __init__(self, next_hop: Hop, bounces_port: int) -> None:
        self.bounces_port = bounces_port
        super().__init__(relay_to=next_hop)  # type: ignore[arg-type]

    def main_cf(self, eight_bit: bool, smtputf8: bool) -> str:
        transport = self.config / "transport"
        transport.write_text(f"example.com smtp:[127.0.0.1]:{self.bounces_port}\n")
        # The VERP forms bounces+...@example.com reach outbox by the domain's entry.
        return super().main_cf(eight_bit, smtputf8) + (
            f"transport_maps = texthash:{transport}\nrecipient_delimiter = +\n"
            "smtp_tls_security_level = none\n"
        )


@pytest.fixture
def postfix_bouncing(smtp, listener):  # type: ignore[no-untyped-def]
    require(POSTFIX)
    server = BouncingPostfix(Hop("127.0.0.1", smtp.port), listener)
    yield server
    server.stop()


def test_postfixs_own_bounce_marks_the_refused_recipient(app, smtp, make_message, postfix_bouncing):
    smtp.recorder.rcpt_replies[GONE] = "550 5.1.1 <gone@example.org>: User unknown"
    mail = app.extensions["mail"]
    app.config["MAIL_SERVER"] = mail.server = postfix_bouncing.host
    app.config["MAIL_PORT"] = mail.port = postfix_bouncing.port
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message = make_message(to=[OK, GONE])
    Worker().drain()
    assert fresh(message.id).status == Status.SENT  # Postfix took it for both
    deadline = time.monotonic() + 30
    # A bounce is stored ("new") before it is read: wait for what reading it found.
    read = select(BounceMail).where(BounceMail.kind != "new")
    while not (found := db.session.scalars(read).all()):
        assert time.monotonic() < deadline, f"no bounce came back\n{postfix_bouncing.log()}"
        time.sleep(0.2)
        db.session.rollback()
    (bounce,) = found
    assert (bounce.kind, bounce.message_pk, bounce.matched_by) == ("hard", message.id, "verp")
    assert bounce.from_header == "Mail Delivery System <MAILER-DAEMON@postfix.test>"
    assert bounce.recipient == GONE and bounce.status == "5.1.1"
    row = fresh(message.id)
    assert states(row)[OK][0] == "sent" and states(row)[GONE][0] == "bounced"
    assert [m.rcpt_tos for m in smtp.received] == [[OK]]
