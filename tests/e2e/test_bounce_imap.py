"""The workers' poll of a bounce mailbox, against a real Dovecot (tests/support/dovecot.py)."""

import logging
import os
import sys
import time

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import select

from outbox import config as settings
from outbox.capabilities.bounces import imap, store
from outbox.capabilities.bounces.settings import Mailbox, mailbox
from outbox.cli import checkup
from outbox.models import BounceMail
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import bouncemail, processes
from tests.support.rows import fresh, states

BOUNCES = "bounces@example.com"


def configured(app, dovecot, **extra):  # type: ignore[no-untyped-def]
    app.config.update({"BOUNCE_ADDRESS": BOUNCES, "BOUNCE_IMAP_URL": dovecot.url(),
                       "BOUNCE_IMAP_CA_FILE": str(dovecot.ca_file), **extra})  # fmt: skip
    return app


def folder(dovecot, name: str = "INBOX") -> int:  # type: ignore[no-untyped-def]
    """How many mails a folder holds (0 if there is no such folder)."""
    with dovecot.client() as client:
        if not client.folder_exists(name):
            return 0
        return int(client.select_folder(name, readonly=True)[b"EXISTS"])


def stored() -> list[BounceMail]:
    db.session.expire_all()
    return list(db.session.scalars(select(BounceMail).order_by(BounceMail.id)))


def sent_to(app, smtp, make_message, addresses):  # type: ignore[no-untyped-def]
    """Messages sent with VERP, one per address: each (message, return path)."""
    messages = [make_message(to=[address]) for address in addresses]
    Worker().drain()
    paths = {mail.message_id: mail.mail_from for mail in smtp.received}
    return [(m, paths[m.message_id]) for m in messages]


@pytest.mark.all_databases
def test_a_poll_takes_every_mail_in_marks_the_bounced_and_moves_them(
    smtp_app, smtp, make_message, dovecot
):
    configured(smtp_app, dovecot)
    formats = [bouncemail.postfix, bouncemail.exim, bouncemail.exchange, bouncemail.gmail]
    who = [f"r{n}@example.org" for n in range(len(formats))]
    sent = sent_to(smtp_app, smtp, make_message, who)
    mails = [build(path, address, m.message_id)
             for build, address, (m, path) in zip(formats, who, sent, strict=True)]  # fmt: skip
    dovecot.deliver(*mails, bouncemail.out_of_office(sent[0][1], who[0]))
    assert imap.poll_if_due("w1") == 5
    for address, (message, _) in zip(who, sent, strict=True):
        assert states(fresh(message.id))[address][0] == "bounced"
    found = stored()
    assert [(m.kind, m.via, m.matched_by) for m in found] == [("hard", "imap", "verp")] * 4 + [
        ("auto-reply", "imap", None)
    ]  # fmt: skip
    assert [m.raw for m in found[:4]] == mails
    assert (folder(dovecot), folder(dovecot, "outbox-done")) == (0, 5)
    assert imap.poll_if_due("w2") is None  # not due again until BOUNCE_IMAP_INTERVAL passed


def test_a_mail_stored_before_a_poll_was_cut_short_is_one_row(app, dovecot):
    configured(app, dovecot)
    mail = bouncemail.stray(BOUNCES)
    store.take_in(mail, "imap")  # stored, then the poll died before moving it
    dovecot.deliver(mail)
    assert imap.poll(app.config) == 1
    assert len(stored()) == 1 and folder(dovecot) == 0 and folder(dovecot, "outbox-done") == 1


def test_with_no_done_folder_handled_mails_are_deleted(app, dovecot):
    configured(app, dovecot, BOUNCE_IMAP_DONE="")
    dovecot.deliver(bouncemail.stray(BOUNCES), bouncemail.stray("x@example.com"))
    assert imap.poll(app.config) == 2
    assert (folder(dovecot), folder(dovecot, "outbox-done"), len(stored())) == (0, 0, 2)


def test_an_unverified_certificate_is_refused_and_nothing_is_taken(app, dovecot, caplog):
    configured(app, dovecot, BOUNCE_IMAP_CA_FILE=None)  # the test CA is not trusted
    dovecot.deliver(bouncemail.stray(BOUNCES))
    with caplog.at_level(logging.WARNING, logger="outbox.bounces"):
        assert imap.poll_if_due("w1") is None
    assert "polling the bounce mailbox failed" in caplog.text
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
    assert folder(dovecot) == 1 and stored() == []


def test_plain_imap_needs_the_opt_out_and_warns(app, dovecot, caplog):
    plain = dovecot.url(scheme="imap")
    with pytest.raises(ValueError, match="BOUNCE_IMAP_ALLOW_PLAINTEXT"):
        settings.check({**settings.DEFAULTS, "BOUNCE_IMAP_URL": plain})
    config = {**settings.DEFAULTS, "BOUNCE_IMAP_URL": plain, "BOUNCE_IMAP_ALLOW_PLAINTEXT": True}
    settings.check(config)
    dovecot.deliver(bouncemail.stray(BOUNCES))
    assert imap.poll(config) == 1
    app.config.update(config)
    scheduler = BackgroundScheduler()
    with caplog.at_level(logging.WARNING, logger="outbox.bounces"):
        imap.schedule(scheduler, app, "w1")  # a worker's start
    assert "w1: BOUNCE_IMAP_URL is plain imap://" in caplog.text
    assert [job.id for job in scheduler.get_jobs()] == ["bounce-imap"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [("pop3://u:p@host/INBOX", "must start with imaps://"),
     ("imaps://host/INBOX", "must name the user, password and host"),
     ("imaps://u:p@host:99999/INBOX", "port")],
)  # fmt: skip
def test_a_bad_mailbox_url_is_refused_at_start(url, problem):
    with pytest.raises(ValueError, match=problem):
        settings.check({**settings.DEFAULTS, "BOUNCE_IMAP_URL": url})


def test_the_url_names_user_password_host_port_and_folder():
    box = mailbox("imaps://b%40x:p%2Fw%3Fd%23@mail.example.com/Bounces%2FNew")
    assert box == Mailbox(True, "mail.example.com", 993, "b@x", "p/w?d#", "Bounces/New")
    assert (mailbox("imap://u:p@h").port, mailbox("imap://u:p@h").folder) == (143, "INBOX")


def test_a_running_worker_polls_the_mailbox(app, dovecot, tmp_path):
    dovecot.deliver(bouncemail.stray(BOUNCES))
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY="test",
               OUTBOX_BOUNCE_IMAP_URL=dovecot.url(), OUTBOX_POLL_INTERVAL="1",
               OUTBOX_BOUNCE_IMAP_CA_FILE=str(dovecot.ca_file), OUTBOX_MAIL_PORT="1")  # fmt: skip
    with processes.group([sys.executable, "-m", "outbox", "worker"], env=env) as worker:
        deadline = time.monotonic() + processes.START_TIMEOUT
        while folder(dovecot, "outbox-done") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes.end(worker) == 0
    assert folder(dovecot) == 0 and [m.via for m in stored()] == ["imap"]


def test_outbox_check_logs_in_and_counts_the_mails_waiting(app, dovecot):
    configured(app, dovecot)
    dovecot.deliver(bouncemail.stray(BOUNCES))
    found = {result.name: result for result in checkup.run()}["bounces"]
    assert found.ok and found.found.endswith("INBOX: 1 mails waiting")
    app.config["BOUNCE_IMAP_CA_FILE"] = None
    found = {result.name: result for result in checkup.run()}["bounces"]
    assert not found.ok and "CERTIFICATE_VERIFY_FAILED" in found.found
    assert found.hint == "set OUTBOX_BOUNCE_IMAP_CA_FILE to the CA of its certificate"
