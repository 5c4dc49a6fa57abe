"""The doorbell: idle workers on this host are woken the moment due mail is committed, where
the database has no NOTIFY (MariaDB/MySQL, SQLite).

Each worker that probes (queue.wakeups.Probe) also binds a Unix datagram socket in the
instance folder's `wake/` (mode 0700). A process that commits new due rows, or a staff
move that makes rows due, sends one empty datagram to every socket there once its
transaction has committed (a rolled-back one rings no one). A ring only starts a pass
sooner, as a NOTIFY does: the probe, every WAKE_INTERVAL, still finds what no ring told
(a message stored on another host, or by a process with another instance folder), and
the tick sweeps after both. A ring costs its sender one read of the folder and a datagram
a worker, and the database nothing.
"""

import atexit
import contextlib
import logging
import os
import secrets
import socket
import threading
from pathlib import Path

from flask import Flask, current_app
from sqlalchemy import event
from sqlalchemy.orm import Session

from outbox.models.db import db

log = logging.getLogger("outbox.worker")

FOLDER = "wake"
DUE = "outbox.doorbell.due"  # in session.info: the transaction made messages due


def folder(app: Flask) -> Path:
    """Where this app's workers keep their doorbells: wake/ in its instance folder."""
    return Path(app.instance_path) / FOLDER


# The ringing end: one unbound socket a process, made at import and kept to the end (one
# made per app would be left to the garbage collector by every app a test makes).
# Non-blocking: a worker whose queue is full has been rung already.
SENDER = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
SENDER.setblocking(False)
atexit.register(SENDER.close)


def ring_at(place: Path) -> int:
    """Ring every doorbell in place; how many took the ring."""
    try:
        entries = list(os.scandir(place))
    except OSError:  # no worker has made the folder yet
        return 0
    rung = 0
    for entry in entries:
        try:
            SENDER.sendto(b"", entry.path)
            rung += 1
        except ConnectionRefusedError:  # a worker that died without taking its own away
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        except OSError:  # gone meanwhile, its queue full, not a socket
            continue
    return rung


def ring() -> None:
    """Wake the idle workers of this host now, in the app's context."""
    ring_at(folder(current_app))


def due_on_commit() -> None:
    """Ring once the session's transaction commits (queue.wakeups calls it)."""
    db.session.info[DUE] = True


def listen() -> None:
    """Ring after each commit of a transaction that made messages due (once a process)."""
    if not event.contains(Session, "after_commit", _committed):
        event.listen(Session, "after_commit", _committed)
        event.listen(Session, "after_soft_rollback", _rolled_back)


def _committed(session: Session) -> None:
    if session.info.pop(DUE, False):
        ring()


def _rolled_back(session: Session, previous: object) -> None:
    session.info.pop(DUE, None)


class Bell:
    """A worker's doorbell: a socket in the folder that sets woken at each datagram.

    Where it cannot be made (a read-only instance folder, a path too long for a socket)
    the worker says so once and is woken by its probe alone.
    """

    def __init__(self, app: Flask, woken: threading.Event) -> None:
        self.woken = woken
        self.path: Path | None = None
        self.sock: socket.socket | None = None
        place = folder(app)
        path = place / f"{os.getpid()}.{secrets.token_hex(4)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            place.mkdir(mode=0o700, parents=True, exist_ok=True)
            sock.bind(str(path))
        except OSError as exc:
            sock.close()
            log.info("wake-ups: no doorbell at %s (%s): woken by the probe alone", path, exc)
            return
        sock.settimeout(1.0)  # to see a stop
        self.path, self.sock = path, sock

    def run(self, stop: threading.Event) -> None:
        """Set woken at each ring until stop."""
        sock = self.sock
        while sock is not None and not stop.is_set():
            try:
                sock.recv(1)
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            self.woken.set()

    def close(self) -> None:
        """Take the doorbell away: rings go to the others only."""
        if self.sock is None or self.path is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.sock.close()
        self.sock = None
