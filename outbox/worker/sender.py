"""SMTP sessions: mails over one timed connection to one route, and their send deadline."""

import contextlib
import dataclasses
import smtplib
import socket
from typing import Any

from flask import current_app
from flask_mail import Connection

from outbox import smtp
from outbox.capabilities import routes
from outbox.core.deliveries import ACCEPTED, Reply, overall
from outbox.core.status import Outcome
from outbox.mail.mime import BuildError
from outbox.mail.rendered import Features, Sendable
from outbox.smtp import pipelining
from outbox.smtp.replies import Result, classify, decoded, refusal
from outbox.smtp.watchdog import Watchdog


class TimedConnection(Connection):
    """Flask-Mail's connection to one route's server, opened with a socket timeout.

    Flask-Mail opens its socket without one, and a server that accepts the
    connection and never answers would hold the worker forever.
    """

    def __init__(self, mail: Any, settings: smtp.HostSettings) -> None:
        super().__init__(mail)
        self.settings = settings

    def configure_host(self) -> smtplib.SMTP:
        """Connected, TLS checked, logged in; smtp.HostError for a fault of server or settings."""
        return smtp.open_host(self.settings)


class SmtpSession:
    """One connection to a route's server, reused mail after mail, opened when first needed."""

    def __init__(self, route: routes.Route | None = None) -> None:
        # None: the first route (the OUTBOX_MAIL_* settings when no OUTBOX_ROUTES is set)
        self.route = route or next(iter(routes.table().routes.values()))
        self.connection: TimedConnection | None = None
        self.aborted = False
        self.watchdog = Watchdog(self.abort)
        # A mail whose MAIL, RCPT and DATA went out with the end of the one before,
        # their replies not read yet (see deliver's following).
        self.ahead: Sendable | None = None

    def host(self) -> smtplib.SMTP:
        """The open connection, made now if there is none."""
        if self.connection is None or self.connection.host is None:
            connection = TimedConnection(current_app.extensions["mail"], self.route.settings)
            host = connection.configure_host()
            connection.host = host
            self.connection = connection
            return host
        return self.connection.host

    captures = False  # a server is spoken to (capture.transport.Session)

    def send(self, pk: int, mail: Sendable, deadline: float | None = None,
             following: Sendable | None = None) -> Result:  # fmt: skip
        """deliver() on this session; pk, the message's row, is for transports that keep mail."""
        return deliver(self, mail, deadline, following)

    def settle(self) -> None:
        """Nothing kept to write: the server has the mail (capture.transport.Session)."""

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


def deliver(
    session: SmtpSession,
    mail: Sendable,
    deadline: float | None = None,
    following: Sendable | None = None,
) -> Result:
    """Send one message to its recipients still pending and say what came of each.

    Never raises for SMTP trouble. SMTP_TIMEOUT bounds each socket operation, not a
    whole message: a server that answers slowly but in time could stretch one send past
    the worker's claim, and another worker would then send the message again. Past
    `deadline` seconds the connection is cut and the message deferred, while the claim
    still holds.

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
        cut = Reply(Outcome.DEFERRED, None, f"sending took longer than {deadline:g}s; cut off")
        # Recipients of a transaction finished before the cut have the mail.
        replies = {address: cut for address, reply in result.recipients.items()
                   if reply.outcome is Outcome.DEFERRED}  # fmt: skip
        return Result(Outcome.DEFERRED, None, cut.text, {**result.recipients, **replies},
                      reply=result.reply)  # fmt: skip
    return result


def features(host: smtplib.SMTP) -> Features:
    """What the server (greeted already) offers that changes the mail written for it."""
    return Features(eight_bit=host.has_extn("8bitmime"), smtputf8=host.has_extn("smtputf8"))


def _ahead(host: smtplib.SMTP, following: Sendable | None, offered: Features) -> bytes:
    """What of following to send with the end of this mail: its commands, if they can go."""
    if following is None or not pipelining.pipelines(host):
        return b""
    try:
        mail = following.for_server(offered)
        if following.returns and mail.recipients:  # VERP: its first transaction's envelope
            first = following.returns[mail.stored[0]]
            mail = dataclasses.replace(mail, sender=first, recipients=mail.recipients[:1])
        return pipelining.envelope(host, mail) if mail.recipients else b""
    except (BuildError, ValueError, UnicodeError):
        return b""  # its own send says what is wrong with it


def _send(session: SmtpSession, mail: Sendable, following: Sendable | None) -> Result:
    written = session.ahead is mail
    session.ahead = None
    try:
        host = session.host()
        host.ehlo_or_helo_if_needed()  # what the server offers decides how the mail is written
    except Exception as exc:
        # Whatever the server said, a failed connection is not this message's fault.
        session.drop()
        if isinstance(exc, smtp.HostError):  # it names the host and the problem
            return Result(Outcome.DEFERRED, exc.code, str(exc), fault=True)
        found = classify(exc, session.route.settings.where)
        where = session.route.settings.where
        return Result(Outcome.DEFERRED, found.code, f"{found.error} at {where}", fault=True)
    offered = features(host)
    try:
        prepared = mail.for_server(offered)
    except BuildError as exc:
        return Result(Outcome.FAILED, None, str(exc))
    replies = {address: Reply(Outcome.FAILED, None, why)
               for address, why in prepared.unsendable.items()}  # fmt: skip
    then = _ahead(host, following, offered) if prepared.recipients else b""
    todo = list(zip(prepared.recipients, prepared.stored, strict=True))
    said = None  # the accepting reply of the last transaction that delivered
    while todo:
        # VERP: the return path names one recipient, so each goes in a
        # transaction of its own on this connection; the next mail's commands go with the last.
        one = todo[:1] if mail.returns else todo
        path = mail.returns[one[0][1]] if mail.returns else prepared.sender
        ahead = b"" if len(one) < len(todo) else then
        try:
            refused = pipelining.sendmail(
                host, path, [wire for wire, _ in one], prepared.data, written=written, then=ahead
            )
        except smtplib.SMTPRecipientsRefused as exc:
            if len(one) == len(todo) or any(code == 421 for code, _ in exc.recipients.values()):
                return _ended(session, exc, following, replies, todo, said)
            written = False  # refused alone; the session was reset for the next transaction
            replies[one[0][1]] = refusal(*exc.recipients[one[0][0]])
            todo = todo[1:]
            continue
        except Exception as exc:
            return _ended(session, exc, following, replies, todo, said)
        said = decoded(refused.reply)
        written = False
        again = []
        for wire, address in one:
            if wire not in refused:
                replies[address] = ACCEPTED
                continue
            replies[address] = refusal(*refused[wire])
            if refused[wire][0] in pipelining.TOO_MANY:
                again.append((wire, address))  # a further transaction on this connection
        if ahead and not again:
            session.ahead = following
        todo = again + todo[len(one) :]
    return _result(replies, None, said)


def _ended(
    session: SmtpSession,
    exc: Exception,
    following: Sendable | None,
    replies: dict[str, Reply],
    todo: list[tuple[str, str]],
    said: str | None,
) -> Result:
    """The attempt after sendmail raised: each recipient not yet served meets the error."""
    found = _after_error(session, exc, following)
    refusals = getattr(exc, "recipients", {})
    for wire, address in todo:
        replies[address] = (
            refusal(*refusals[wire]) if wire in refusals
            else Reply(found.outcome, found.code, found.error or "")
        )  # fmt: skip
    return _result(replies, found, said)


def _after_error(session: SmtpSession, exc: Exception, following: Sendable | None) -> Result:
    """Leave the session fit for the next mail after sendmail raised; what the error means."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        if any(code == 421 for code, _ in exc.recipients.values()):
            session.drop()  # sendmail has closed the connection
        # otherwise sendmail has reset the session
    elif isinstance(exc, pipelining.DataRefused):
        session.ahead = following  # the transaction ended at the dot; the next one is under way
    elif isinstance(exc, smtplib.SMTPResponseException):
        if exc.smtp_code == 421 or exc.smtp_code < 200:
            session.drop()  # the server is closing, or the reply made no sense
        else:
            session.reset()  # sendmail sends no RSET when the DATA command is refused
    else:
        session.drop()
    return classify(exc, session.route.settings.where)


def _result(replies: dict[str, Reply], error: Result | None, said: str | None) -> Result:
    """The attempt as a whole, from what came of each recipient (see deliveries.settle)."""
    outcome = overall(replies)
    if error is not None:
        return Result(outcome, error.code, error.error, replies, error.fault, said)
    return Result(outcome, None, None, replies, reply=said)
