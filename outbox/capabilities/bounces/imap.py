"""The workers' poll of a bounce mailbox over IMAP (imapclient): store, read, then move or delete.

OUTBOX_BOUNCE_IMAP_URL names the mailbox: imaps://user:password@host[:port]/FOLDER (the
user and password percent-encoded as in any URL). Every worker asks every
BOUNCE_IMAP_INTERVAL seconds; the first whose UPDATE moves the turn row on polls (see
retention.take_turn), the others do nothing. Each mail is stored (store.save) before it
is moved or deleted, so a poll cut short loses nothing: the next one finds the mail
again, and its digest makes it the same row.
"""

import logging
import ssl
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from flask import Flask, current_app
from imapclient import IMAPClient

from outbox.capabilities import retention
from outbox.capabilities.bounces import store
from outbox.capabilities.bounces.settings import context, mailbox
from outbox.models import utcnow
from outbox.models.db import db

log = logging.getLogger("outbox.bounces")
FETCH_BATCH = 50  # mails fetched at a time


def connect(config: Any) -> IMAPClient:
    """A logged-in session on the mailbox, its certificate and host name checked."""
    box = mailbox(config["BOUNCE_IMAP_URL"])
    tls = context(config) if box.tls else None
    client = IMAPClient(box.host, box.port, ssl=box.tls, ssl_context=tls,
                        timeout=config["SMTP_TIMEOUT"])  # fmt: skip
    try:
        client.login(box.user, box.password)
        client.select_folder(box.folder)
    except Exception:
        client.shutdown()
        raise
    return client


def poll(config: Any = None) -> int:
    """Take in every mail of the folder, then move each to BOUNCE_IMAP_DONE or delete it.

    Returns how many mails were handled.
    """
    config = config or current_app.config
    done, handled = config.get("BOUNCE_IMAP_DONE") or "", 0
    client = connect(config)
    try:
        if done and not client.folder_exists(done):
            client.create_folder(done)
        uids = client.search(["NOT", "DELETED"])
        for start in range(0, len(uids), FETCH_BATCH):
            batch = uids[start : start + FETCH_BATCH]
            fetched = client.fetch(batch, ["BODY.PEEK[]"])
            taken = []
            for uid in batch:
                raw = fetched.get(uid, {}).get(b"BODY[]")
                if raw is None:
                    continue  # gone meanwhile (another client)
                store.take_in(bytes(raw), "imap")
                taken.append(uid)
            _put_away(client, taken, done)
            handled += len(taken)
    finally:
        client.logout()
    return handled


def _put_away(client: IMAPClient, uids: list[int], done: str) -> None:
    """Move the handled mails to the done folder, or delete them."""
    if not uids:
        return
    if done and client.has_capability("MOVE"):
        client.move(uids, done)
        return
    if done:
        client.copy(uids, done)
    client.delete_messages(uids)
    if client.has_capability("UIDPLUS"):
        client.uid_expunge(uids)
    else:
        client.expunge()


def probe(config: Any) -> tuple[bool, str, str | None]:
    """For `outbox check`: log in, select the folder, count its mails; (ok, found, fix hint)."""
    box = mailbox(config["BOUNCE_IMAP_URL"])
    try:
        client = connect(config)
    except Exception as exc:
        hint = "set OUTBOX_BOUNCE_IMAP_CA_FILE to the CA of its certificate"
        if not isinstance(exc, ssl.SSLCertVerificationError):
            hint = "check OUTBOX_BOUNCE_IMAP_URL: host, port, user, password and folder"
        return False, f"{box.host}:{box.port}: {type(exc).__name__}: {exc}", hint
    try:
        waiting = len(client.search(["NOT", "DELETED"]))
    finally:
        client.logout()
    return True, f"{box.host}:{box.port} {box.folder}: {waiting} mails waiting", None


def poll_if_due(worker_id: str) -> int | None:
    """A worker's turn at the mailbox, if it is its turn; quick when it is not.

    A failure (the server down, a refused login) is logged, not raised: the next turn
    tries again, and what was stored stays stored.
    """
    config = current_app.config
    every = timedelta(seconds=config["BOUNCE_IMAP_INTERVAL"])
    try:
        if not retention.take_turn(utcnow(), "bounce-imap", every):
            return None
        handled = poll(config)
        if handled:
            log.info("%s: took %d bounce mails from the mailbox", worker_id, handled,
                     extra={"worker_id": worker_id})  # fmt: skip
        return handled
    except Exception as exc:
        db.session.rollback()
        log.warning("%s: polling the bounce mailbox failed: %s", worker_id, exc,
                    extra={"worker_id": worker_id})  # fmt: skip
        return None


def schedule(scheduler: BaseScheduler, app: Flask, worker_id: str) -> None:
    """Add the poll to a worker's scheduler: each worker asks, the one whose turn it is polls.

    Plain imap:// (allowed by BOUNCE_IMAP_ALLOW_PLAINTEXT) is warned about here, at start.
    """
    interval = app.config["BOUNCE_IMAP_INTERVAL"]
    if not mailbox(app.config["BOUNCE_IMAP_URL"]).tls:
        log.warning("%s: BOUNCE_IMAP_URL is plain imap://: the password and the bounce mails "
                    "cross the network unencrypted (BOUNCE_IMAP_ALLOW_PLAINTEXT)", worker_id,
                    extra={"worker_id": worker_id})  # fmt: skip

    def job() -> None:
        with app.app_context():
            poll_if_due(worker_id)

    scheduler.add_job(job, "interval", seconds=interval, jitter=interval / 4, id="bounce-imap",
                      max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))  # fmt: skip
