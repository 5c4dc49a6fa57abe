"""SMTP sessions: a batch over one timed connection, its send deadline, and sorting SMTP errors."""

import contextlib
import smtplib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flask import current_app
from flask_mail import Connection

from . import pipelining, smtp
from .rendered import Prepared
from .status import WATCHDOG_LATENESS, Outcome


@dataclass(frozen=True)
class Result:
    """What one delivery attempt came to."""

    outcome: Outcome
    code: int | None = None
    error: str | None = None


class TimedConnection(Connection):
    """Flask-Mail's connection, opened with a socket timeout.

    Flask-Mail opens its socket without one, and a server that accepts the
    connection and never answers would hold the worker forever.
    """

    def configure_host(self) -> smtplib.SMTP:
        """Connected, TLS checked, logged in; smtp.HostError for a fault of server or settings."""
        return smtp.open_host(smtp.HostSettings.of(self.mail, current_app.config))


class Watchdog:
    """One thread that calls on_expiry once a deadline has passed; armed anew for each send.

    It looks at the deadline once per WATCHDOG_LATENESS of the armed period, so it fires at
    most that much late (status.Lease counts on it). Arming and disarming never wake it:
    a timer thread per message, or a notify per message, cost more than the rest of the
    bookkeeping.
    """

    def __init__(self, on_expiry: Callable[[], None]) -> None:
        self.on_expiry = on_expiry
        self.deadline: float | None = None
        self.tick = 1.0
        self.closed = False
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    def arm(self, seconds: float) -> None:
        with self.changed:
            self.deadline = time.monotonic() + seconds
            self.tick = seconds * WATCHDOG_LATENESS
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
                self.thread.start()

    def disarm(self) -> None:
        with self.changed:
            self.deadline = None

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify()
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def _watch(self) -> None:
        with self.changed:
            while not self.closed:
                now = time.monotonic()
                if self.deadline is not None and now >= self.deadline:
                    self.deadline = None
                    self.on_expiry()
                    continue
                left = self.tick if self.deadline is None else self.deadline - now
                self.changed.wait(min(left, self.tick))


class SmtpSession:
    """One SMTP connection reused across a batch, opened on first use and after a drop."""

    def __init__(self) -> None:
        self.connection: TimedConnection | None = None
        self.aborted = False
        self.watchdog = Watchdog(self.abort)
        # A mail whose MAIL, RCPT and DATA went out with the end of the one before,
        # their replies not read yet (see deliver's following).
        self.ahead: Prepared | None = None

    def host(self) -> smtplib.SMTP:
        """The open connection, made now if there is none."""
        if self.connection is None or self.connection.host is None:
            connection = TimedConnection(current_app.extensions["mail"])
            host = connection.configure_host()
            connection.host = host
            self.connection = connection
            return host
        return self.connection.host

    def abort(self) -> None:
        """Cut the connection from another thread: whatever waits on it fails at once."""
        self.aborted = True
        host = self.connection.host if self.connection is not None else None
        sock = getattr(host, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        """Forget the connection after an error that may have broken it.

        A mail sent ahead goes with it: its DATA was never sent, so the server drops it.
        """
        if self.connection is not None and self.connection.host is not None:
            self.connection.host.close()
        self.connection = None
        self.ahead = None

    def reset(self) -> None:
        """End the mail transaction in progress, or drop the connection if that fails."""
        if self.connection is not None and self.connection.host is not None:
            try:
                code, _ = self.connection.host.rset()
            except (smtplib.SMTPException, OSError):
                code = 0
            if code != 250:
                self.drop()

    def close(self) -> None:
        """Say goodbye to the server if it is still listening."""
        self.watchdog.close()
        if self.ahead is not None:  # the server waits for a DATA that will not come
            self.drop()
        if self.connection is not None and self.connection.host is not None:
            try:
                self.connection.host.quit()
            except (smtplib.SMTPException, OSError):
                self.connection.host.close()
        self.connection = None

    def __enter__(self) -> "SmtpSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refusals(recipients: dict[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{addr}: {code} {_text(reply)}" for addr, (code, reply) in recipients.items())


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


def classify(exc: BaseException) -> Result:
    """Sort a sending error: 4xx, timeouts and lost connections defer; 5xx fails."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        transient = any(code < 500 for code in codes)
        outcome = Outcome.DEFERRED if transient else Outcome.FAILED
        code = min(codes) if transient else max(codes)
        return Result(outcome, code, f"all recipients refused: {_refusals(exc.recipients)}")
    if isinstance(exc, smtplib.SMTPResponseException):
        code = exc.smtp_code
        text = f"{code} {_text(exc.smtp_error)}"
        outcome = Outcome.FAILED if 500 <= code < 600 else Outcome.DEFERRED
        return Result(outcome, code, text)
    if isinstance(exc, TimeoutError):
        return Result(Outcome.DEFERRED, None, f"SMTP server timed out: {exc}")
    if isinstance(exc, smtplib.SMTPServerDisconnected | OSError):
        return Result(Outcome.DEFERRED, None, f"{type(exc).__name__}: {exc}")
    return Result(Outcome.FAILED, None, f"unexpected error: {type(exc).__name__}: {exc}")


def deliver(
    session: SmtpSession,
    mail: Prepared,
    deadline: float | None = None,
    following: Prepared | None = None,
) -> Result:
    """Send one message and say what came of it; never raises for SMTP trouble.

    SMTP_TIMEOUT bounds each socket operation, not a whole message: a server that
    answers slowly but in time could stretch one send past the worker's claim, and
    another worker would then send the message again. Past `deadline` seconds the
    connection is cut and the message deferred, while the claim still holds.

    `following`, the mail to be sent next on this session, has its MAIL, RCPT and DATA
    written with the end of this one when the server pipelines (RFC 2920 lets the
    message content open a group), so each mail takes one round trip instead of two.
    Nothing of it is delivered until its own deliver sends its content; a session
    closed or dropped before that drops it.
    """
    if session.ahead is not None and session.ahead is not mail:
        session.drop()  # the server holds another mail's envelope and waits for its content
    if deadline:
        session.watchdog.arm(deadline)
    try:
        result = _send(session, mail, following)
    finally:
        session.watchdog.disarm()
    if session.aborted:
        session.drop()
        session.aborted = False
        return Result(Outcome.DEFERRED, None, f"sending took longer than {deadline:g}s; cut off")
    return result


def _ahead(host: smtplib.SMTP, following: Prepared | None) -> bytes:
    """What of following to send with the end of this mail: its commands, if they can go."""
    if following is None or not pipelining.pipelines(host):
        return b""
    try:
        return pipelining.envelope(host, following)
    except (ValueError, UnicodeError):
        return b""  # its own send says what is wrong with it


def _send(session: SmtpSession, mail: Prepared, following: Prepared | None) -> Result:
    written = session.ahead is mail
    session.ahead = None
    try:
        host = session.host()
    except Exception as exc:
        # Whatever the server said, a failed connection is not this message's fault.
        session.drop()
        found = classify(exc)
        return Result(Outcome.DEFERRED, found.code, f"cannot connect: {found.error}")
    try:
        host.ehlo_or_helo_if_needed()  # what the server offers decides on sending ahead
        then = _ahead(host, following)
        refused = pipelining.sendmail(
            host, mail.sender, mail.recipients, mail.data, written=written, then=then
        )
    except smtplib.SMTPRecipientsRefused as exc:
        if any(code == 421 for code, _ in exc.recipients.values()):
            session.drop()  # sendmail has closed the connection
        return classify(exc)  # otherwise sendmail has reset the session
    except pipelining.DataRefused as exc:
        session.ahead = following  # the transaction ended at the dot; the next one is under way
        return classify(exc)
    except smtplib.SMTPResponseException as exc:
        if exc.smtp_code == 421 or exc.smtp_code < 200:
            session.drop()  # the server is closing, or the reply made no sense
        else:
            session.reset()  # sendmail sends no RSET when the DATA command is refused
        return classify(exc)
    except Exception as exc:
        session.drop()
        return classify(exc)
    if then:
        session.ahead = following
    if refused:
        return Result(Outcome.SENT, None, f"some recipients refused: {_refusals(refused)}")
    return Result(Outcome.SENT)
