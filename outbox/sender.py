"""Speaking SMTP: building each message with Flask-Mail and sorting SMTP errors."""

import binascii
import contextlib
import copy
import re
import secrets
import smtplib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.header import Header
from email.policy import Compat32
from email.utils import getaddresses, parseaddr

from flask import current_app
from flask_mail import Attachment, Connection, Message, sanitize_address, sanitize_addresses

from .drafts import LINE_BREAK
from .models import Message as Row
from .status import Outcome


class WirePolicy(Compat32):
    """The legacy policy with SMTP's line ends, writing short ASCII header lines as they are.

    Flask-Mail renders with policy.SMTP, whose header parsing and refolding cost about
    3 ms per small message here, ten times the rest of a send. Flask-Mail has already
    encoded the subject, addresses and file names to ASCII, and build() encodes the
    extra headers, so nothing is left for the modern policy to do. The legacy folding
    still runs a Header through every line; lines that need no folding skip it.
    """

    def _fold(self, name: str, value: object, sanitize: bool) -> str:
        if isinstance(value, str) and value.isascii():
            # Flask-Mail's encoded words come folded already ("\n " between them),
            # each up to 76 characters: the first then goes beside the name.
            first, *rest = value.splitlines() or [""]
            lines = [f"{name}: {first}", *rest]
            limit = self.max_line_length or 78
            # A line with no space in its value has nowhere to fold (a Message-ID).
            unfoldable = not rest and not any(c in " \t" for c in first)
            if (
                len(lines[0]) <= (limit if not rest and not unfoldable else 998)
                and all(len(line) <= limit for line in rest)
                and all(line[:1] in (" ", "\t") and line.strip() for line in rest)
            ):
                return self.linesep.join(lines) + self.linesep
        return super()._fold(name, value, sanitize)  # type: ignore[misc]


WIRE = WirePolicy(linesep="\r\n")


# Raw attachment bytes base64-encoded at a time: 57 bytes make one 76-character
# line, as email.encoders writes them; a block is about 620 KiB on the wire.
BLOCK_BYTES = 57 * 8192
# smtplib's dot-stuffing: a line that starts with "." gets another.
LINE_DOT = re.compile(rb"(?m)^\.")


def _base64_lines(data: bytes) -> Iterator[bytes]:
    """data as email.encoders writes it: base64 lines of 76 characters, here with CRLF."""
    view = memoryview(data)
    for start in range(0, len(view), BLOCK_BYTES):
        text = binascii.b2a_base64(view[start : start + BLOCK_BYTES], newline=False)
        lines = [text[i : i + 76] for i in range(0, len(text), 76)]
        lines.append(b"")  # the last line's CRLF
        yield b"\r\n".join(lines)


def _base64_size(size: int) -> int:
    chars = -(-size // 3) * 4
    return chars + 2 * -(-chars // 76)


@dataclass(frozen=True)
class Rendered:
    """A message's DATA: the rendered text around each attachment's body, kept raw.

    texts holds one more item than bodies: the text before the first body, between
    bodies and after the last. A body goes on the wire as base64 made a block at a
    time, so a 20 MiB attachment is never held encoded, whole, beside its raw bytes.
    """

    texts: list[bytes]
    bodies: list[bytes]

    def size(self) -> int:
        """Bytes in the DATA before dot-stuffing, as the SIZE parameter counts them."""
        return sum(map(len, self.texts)) + sum(_base64_size(len(b)) for b in self.bodies)

    def pieces(self) -> Iterator[bytes]:
        """The DATA in order, in pieces that each begin a line."""
        yield self.texts[0]
        for body, text in zip(self.bodies, self.texts[1:], strict=True):
            yield from _base64_lines(body)
            yield text


class OutgoingMessage(Message):
    """Flask-Mail's message, rendered for the wire with the legacy policy."""

    def render(self) -> Rendered:
        """The DATA, each attachment's body left out of the email package.

        The email package holds an attachment four times over while it encodes and
        writes it (raw, base64 pieces, joined, and as a str). Flask-Mail renders a
        stand-in for each body instead: bytes whose base64 is one random line, found
        in the text afterwards and cut out, with the headers Flask-Mail writes.
        """
        if not self.attachments:
            return Rendered([self._wire_bytes()], [])
        stand_in, markers, bodies = copy.copy(self), [], []
        stand_in.attachments = []
        for attachment in self.attachments:
            if isinstance(attachment.data, str):  # not from build(): left to the email package
                stand_in.attachments.append(attachment)
                continue
            bodies.append(attachment.data)
            marker = f"outboxattachment{secrets.token_hex(16)}".encode()  # 48 base64 digits
            markers.append(marker + b"\r\n")
            stand = copy.copy(attachment)
            stand.data = binascii.a2b_base64(marker)
            stand_in.attachments.append(stand)
        rest, texts = stand_in._wire_bytes(), []
        for marker in markers:
            before, found, rest = rest.partition(marker)
            if not found:
                raise ValueError("an attachment's stand-in is missing from the rendered text")
            texts.append(before)
        texts.append(rest)
        return Rendered(texts, bodies)

    def as_bytes(self) -> bytes:
        return b"".join(self.render().pieces())

    def _wire_bytes(self) -> bytes:
        message = self._message()
        message.policy = WIRE  # Flask-Mail sets policy.SMTP, which set_boundary would use
        for part in message.walk():
            if part.is_multipart():
                # Set here, the generator need not compile a regular expression per
                # part to prove its own boundary absent from the text. A boundary of
                # 128 random bits is in no text that did not guess it, and "=_" is in
                # no base64 or quoted-printable text at all.
                part.set_boundary(f"=_{secrets.token_hex(16)}")
        return message.as_bytes(policy=WIRE)


def _ascii_header(value: str) -> str:
    """A header value as ASCII, RFC 2047 encoded if it holds anything else."""
    return value if value.isascii() else Header(value, "utf-8").encode()


class BuildError(Exception):
    """The stored message cannot be turned into a mail; retrying will not help."""


@dataclass(frozen=True)
class Result:
    """What one delivery attempt came to."""

    outcome: Outcome
    code: int | None = None
    error: str | None = None


def _addresses(column: str) -> list[str | tuple[str, str]]:
    # Pairs, not "name <addr>" text: Flask-Mail reads text again with parseaddr,
    # which cuts an unquoted name holding a comma in two.
    return [(name, addr) for name, addr in getaddresses([column]) if addr]


def _breaks_line(texts: list[object]) -> bool:
    return any(LINE_BREAK.search(str(text)) for text in texts)


def build(row: Row, attachments: list[tuple[str, str, bytes]]) -> OutgoingMessage:
    """The Flask-Mail message for a stored row, with the row's fixed Message-ID."""
    try:
        headers = dict(row.headers or {})
        # Checked as stored: Flask-Mail's has_bad_headers() looks at neither Cc nor
        # the extra headers, and getaddresses reads "Bcc:" after a line break as
        # more addresses.
        stored = [row.subject, row.from_addr, row.reply_to, row.to_addrs, row.cc_addrs]
        if _breaks_line([*stored, row.bcc_addrs, *headers, *headers.values()]):
            raise BuildError("a header holds a line break")
        if not parseaddr(row.from_addr)[1]:
            raise BuildError(f"no sender address in {row.from_addr!r}")
        to, cc, bcc = (_addresses(c) for c in (row.to_addrs, row.cc_addrs, row.bcc_addrs))
        if not (to or cc or bcc):
            # smtplib would refuse an empty recipient list with an empty error.
            raise BuildError("no recipient address in to, cc or bcc")
        message = OutgoingMessage(
            subject=row.subject,
            recipients=to,
            cc=cc,
            bcc=bcc,
            sender=row.from_addr,
            reply_to=row.reply_to,
            body=row.text_body if row.text_body is not None else "",
            html=row.html_body,
            extra_headers={name: _ascii_header(value) for name, value in headers.items()},
            attachments=[Attachment(n, t, d) for n, t, d in attachments],
        )
        message.msgId = row.message_id
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"cannot build message: {type(exc).__name__}: {exc}") from exc
    return message


class TimedConnection(Connection):
    """Flask-Mail's connection, opened with a socket timeout.

    Flask-Mail opens its socket without one, and a server that accepts the
    connection and never answers would hold the worker forever.
    """

    def configure_host(self) -> smtplib.SMTP:
        state, timeout = self.mail, current_app.config["SMTP_TIMEOUT"]
        factory = smtplib.SMTP_SSL if state.use_ssl else smtplib.SMTP
        host = factory(state.server, state.port, timeout=timeout)
        try:
            if state.use_tls:
                host.starttls()
            if state.username and state.password:
                host.login(state.username, state.password)
        except BaseException:
            host.close()
            raise
        return host


class Watchdog:
    """One thread that calls on_expiry once a deadline has passed; armed anew for each send.

    It looks at the deadline at least eight times per armed period, so it fires at most
    an eighth of the period late. Arming and disarming never wake it: a timer thread per
    message, or a notify per message, cost more than the rest of the bookkeeping.
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
            self.tick = seconds / 8
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
        """Forget the connection after an error that may have broken it."""
        if self.connection is not None and self.connection.host is not None:
            self.connection.host.close()
        self.connection = None

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
    session: SmtpSession, message: OutgoingMessage, deadline: float | None = None
) -> Result:
    """Send one message and say what came of it; never raises for SMTP trouble.

    SMTP_TIMEOUT bounds each socket operation, not a whole message: a server that
    answers slowly but in time could stretch one send past the worker's claim, and
    another worker would then send the message again. Past `deadline` seconds the
    connection is cut and the message deferred, while the claim still holds.
    """
    try:
        data = message.render()
        envelope = (sanitize_address(message.sender), list(sanitize_addresses(message.send_to)))
    except Exception as exc:
        return Result(Outcome.FAILED, None, f"cannot build message: {type(exc).__name__}: {exc}")
    if deadline:
        session.watchdog.arm(deadline)
    try:
        result = _send(session, envelope, data)
    finally:
        session.watchdog.disarm()
    if session.aborted:
        session.drop()
        session.aborted = False
        return Result(Outcome.DEFERRED, None, f"sending took longer than {deadline:g}s; cut off")
    return result


def sendmail(
    host: smtplib.SMTP, sender: str, recipients: list[str], data: Rendered
) -> dict[str, tuple[int, bytes]]:
    """smtplib's SMTP.sendmail, sending the DATA piece by piece.

    smtplib makes three whole copies of a message on its way out (dot-stuffed, then
    with CRLF, then with the final dot). Here each piece is dot-stuffed and sent on
    its own. The rest is sendmail's: the same commands, the same RSET or close, the
    same exceptions, and the refused recipients when some but not all are refused.
    """
    host.ehlo_or_helo_if_needed()
    options = [f"size={data.size()}"] if host.does_esmtp and host.has_extn("size") else []
    code, reply = host.mail(sender, options)
    if code != 250:
        _end_transaction(host, code)
        raise smtplib.SMTPSenderRefused(code, reply, sender)
    refused = {}
    for recipient in recipients:
        code, reply = host.rcpt(recipient)
        if code not in (250, 251):
            refused[recipient] = (code, reply)
        if code == 421:
            host.close()
            raise smtplib.SMTPRecipientsRefused(refused)
    if len(refused) == len(recipients):
        _rset(host)
        raise smtplib.SMTPRecipientsRefused(refused)
    code, reply = _data(host, data)
    if code != 250:
        _end_transaction(host, code)
        raise smtplib.SMTPDataError(code, reply)
    return refused


def _end_transaction(host: smtplib.SMTP, code: int) -> None:
    """Close after a 421, else RSET, as sendmail does after a refused command."""
    if code == 421:
        host.close()
    else:
        _rset(host)


def _rset(host: smtplib.SMTP) -> None:
    with contextlib.suppress(smtplib.SMTPServerDisconnected):
        host.rset()


def _data(host: smtplib.SMTP, data: Rendered) -> tuple[int, bytes]:
    """smtplib's SMTP.data for a message in pieces, each starting a line."""
    host.putcmd("data")
    code, reply = host.getreply()
    if code != 354:
        raise smtplib.SMTPDataError(code, reply)
    held = b""
    for piece in data.pieces():
        if not piece:
            continue
        if held:
            host.send(held)
        # Base64 lines never start with a dot; find() is far cheaper than the regex.
        dotted = piece.startswith(b".") or piece.find(b"\n.") >= 0
        held = LINE_DOT.sub(b"..", piece) if dotted else piece
    # The last piece goes with the final dot in one write, as smtplib sends it.
    host.send(held + (b".\r\n" if held.endswith(b"\r\n") else b"\r\n.\r\n"))
    return host.getreply()


def _send(session: SmtpSession, envelope: tuple[str, list[str]], data: Rendered) -> Result:
    try:
        host = session.host()
    except Exception as exc:
        # Whatever the server said, a failed connection is not this message's fault.
        session.drop()
        found = classify(exc)
        return Result(Outcome.DEFERRED, found.code, f"cannot connect: {found.error}")
    try:
        refused = sendmail(host, envelope[0], envelope[1], data)
    except smtplib.SMTPRecipientsRefused as exc:
        if any(code == 421 for code, _ in exc.recipients.values()):
            session.drop()  # sendmail has closed the connection
        return classify(exc)  # otherwise sendmail has reset the session
    except smtplib.SMTPResponseException as exc:
        if exc.smtp_code == 421 or exc.smtp_code < 200:
            session.drop()  # the server is closing, or the reply made no sense
        else:
            session.reset()  # sendmail sends no RSET when the DATA command is refused
        return classify(exc)
    except Exception as exc:
        session.drop()
        return classify(exc)
    if refused:
        return Result(Outcome.SENT, None, f"some recipients refused: {_refusals(refused)}")
    return Result(Outcome.SENT)
