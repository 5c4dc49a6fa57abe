"""The SMTP submission server (aiosmtpd): AUTH with an API token, then mail queued as it came.

No relay without AUTH (530 to MAIL, RCPT and DATA before it), and AUTH only over TLS
unless SMTPD_ALLOW_PLAINTEXT_AUTH. Envelope addresses are checked as the API checks
them (outbox.core.addresses), the mail itself by queue_raw; `250 2.0.0 queued as <id>` only
once it is committed, 421 when the database cannot be reached, so that the client
keeps its copy and tries again.
"""

import asyncio
import logging
import ssl
import warnings
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from flask import Flask
from sqlalchemy.exc import DBAPIError

from outbox.capabilities.submission import Refused, auth
from outbox.capabilities.submission.committer import Committer
from outbox.capabilities.submission.store import Submitted
from outbox.core import addresses
from outbox.smtp import admission
from outbox.smtp import server as smtp_server

log = logging.getLogger("outbox.smtpd")

MAX_RECIPIENTS = 1000  # RCPT TO a mail; RFC 5321 4.5.3.1.8 asks servers to take at least 100
IDLE_TIMEOUT = 300.0  # seconds without a command before the server hangs up (RFC 5321 4.5.3.2.7)
UNREACHABLE = "421 4.3.0 The database cannot be reached: nothing was queued; try again later"
MALFORMED = "553 5.1.3 Error: malformed address"  # aiosmtpd's, for what it cannot parse
LOCAL_ERROR = "451 4.3.0 Local error: nothing was queued; try again later"
NULL_SENDER = "<>"  # MAIL FROM:<> as aiosmtpd hands it over


def _replies(limit: int) -> dict[str, str]:
    """aiosmtpd's own fixed replies, as outbox words them: what went wrong, what to do."""
    too_big = f"552 5.3.4 The mail is over {limit} bytes, the most this server takes"
    return {
        # A line of DATA is cut off only past the size limit (Submission.smtp_DATA).
        "500 Line too long (see RFC5321 4.5.3.1.6)": too_big,
        "552 Error: Too much mail data": too_big,
        "552 Error: message size exceeds fixed maximum message size": too_big,
        "530 5.7.0 Authentication required": "530 5.7.0 Authentication required: "
        "AUTH PLAIN or LOGIN with an API token's name and the token first",
        "538 5.7.11 Encryption required for requested authentication mechanism":
        "538 5.7.11 Encryption required: STARTTLS before AUTH",
    }  # fmt: skip


def _peer(session: Session | None) -> str:
    peer = session.peer if session else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def _sender(envelope: Envelope) -> str:
    """MAIL FROM's address as queue_raw takes it: "" for the null sender."""
    return "" if envelope.mail_from == NULL_SENDER else str(envelope.mail_from)


def _parsed(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
) -> AuthResult:
    """aiosmtpd's authenticator, called on the loop: only hands on the parsed credentials."""
    return AuthResult(success=True, auth_data=data)


class Submission(smtp_server.Connection):
    """aiosmtpd's protocol with the token check off the loop and outbox's wording of replies.

    A client is let in within SMTPD_MAX_CONNECTIONS and SMTPD_MAX_CLIENT_CONNECTIONS, and
    until it has logged in may stay silent only SMTPD_PREAUTH_TIMEOUT between commands.
    """

    # A command line's limit, AUTH's included; smtp_DATA lifts it for the mail's lines.
    line_length_limit = 1000
    event_handler: "Handler"

    def __init__(self, handler: "Handler", **options: Any) -> None:
        # aiosmtpd warns of plaintext AUTH on every connection; `outbox smtpd` logs it once.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            super().__init__(handler, authenticator=_parsed, auth_required=True, **options)
        self.app = handler.app
        self.replies = _replies(handler.limit)
        self.malformed = ""
        self.preauth_timeout = min(self._timeout_duration, handler.preauth_timeout)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        after_starttls = self._original_transport is not None  # the same client, now in TLS
        super().connection_made(transport)
        if not after_starttls and self.refusal is None:
            log.info("smtpd: connection from %s", _peer(self.session))

    def _reset_timeout(self, duration: float | None = None) -> None:
        if duration is None and not (self.session and self.session.authenticated):
            duration = self.preauth_timeout  # a client that has not logged in holds less
        super()._reset_timeout(duration)

    def _timeout_cb(self) -> None:
        log.info("smtpd: %s idle too long, disconnected", _peer(self.session))
        self._writer.write(b"421 4.4.2 Idle too long: closing the connection\r\n")
        super()._timeout_cb()

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """aiosmtpd's reading of MAIL FROM's and RCPT TO's argument, by the same parsers of
        the email package, without the typing.Protocol class aiosmtpd defines anew at each
        call (4% of the server's CPU a mail, bench/submission.py)."""
        if not arg:
            return "", ""
        parse = get_angle_addr if arg.lstrip().startswith("<") else get_addr_spec
        try:
            found, rest = parse(arg)
        except HeaderParseError:
            found = None
        if found is not None:
            address: str = found.addr_spec
            local = address.rpartition("@")[0]
            if not (self.local_part_limit and len(local) > self.local_part_limit):
                return address, rest
        self.malformed = arg  # aiosmtpd answers MALFORMED, which push() words with arg
        return None, None

    async def push(self, status: Any) -> None:
        if status == MALFORMED:
            status = f"553 5.1.3 Malformed address: {self.malformed!r}; give it as <local@domain>"
        elif isinstance(status, str):
            status = self.replies.get(status, status)
        await super().push(status)

    async def smtp_DATA(self, arg: str) -> None:  # noqa: N802
        """DATA with lines as long as the mail may be, for the store to repair.

        Long lines and bare LFs are mended (submission.repair), and with bare LFs
        a client's whole mail is one line to aiosmtpd. aiosmtpd takes a line only as long
        as its reader's limit, which is also what the reader buffers before it stops
        reading: lifted to the size limit for DATA alone, it keeps a mail's memory to a
        few times OUTBOX_MAX_MESSAGE_BYTES, and command lines to line_length_limit.
        """
        reader: Any = self._reader  # StreamReader keeps its limit in _limit, with no setter
        reader._limit = self.line_length_limit = self.event_handler.limit + len(b".\r\n")
        try:
            await super().smtp_DATA(arg)
        finally:
            reader._limit = self.line_length_limit = type(self).line_length_limit

    async def check_auth_needed(self, caller_method: str) -> bool:
        needed = await super().check_auth_needed(caller_method)
        if needed:
            log.warning("smtpd: %s from %s before AUTH refused", caller_method, _peer(self.session))
        return needed

    async def auth_PLAIN(self, _: Any, args: list[str]) -> AuthResult:  # noqa: N802
        return await self._checked(await super().auth_PLAIN(_, args))

    async def auth_LOGIN(self, _: Any, args: list[str]) -> AuthResult:  # noqa: N802
        return await self._checked(await super().auth_LOGIN(_, args))

    async def _checked(self, parsed: AuthResult) -> AuthResult:
        """The credentials aiosmtpd parsed, checked against the tokens in a thread."""
        if not parsed.success:
            return parsed
        given: LoginPassword = parsed.auth_data  # type: ignore[assignment]  # from _parsed
        peer = _peer(self.session)
        reply = await asyncio.to_thread(auth.refusal, self.app, given.login, given.password, peer)
        if reply is not None:
            return AuthResult(success=False, handled=False, message=reply)
        self._reset_timeout(self._timeout_duration)  # logged in: the full idle time from now
        return AuthResult(success=True, auth_data=given.login.decode())


class Handler(smtp_server.Handler):
    """aiosmtpd handler: envelope addresses checked, DATA queued by the committer's thread
    (store.queue_many, each mail as queue_raw would)."""

    def __init__(self, app: Flask) -> None:
        super().__init__(admission.smtpd_limits(app.config))
        self.app = app
        self.limit: int = app.config["MAX_MESSAGE_BYTES"]
        self.allowed: frozenset[str] = app.config["ALLOWED_SPECIAL_DOMAINS"]
        self.preauth_timeout: float = app.config["SMTPD_PREAUTH_TIMEOUT"]
        self.committer = Committer(app)

    async def handle_EHLO(  # noqa: N802 (aiosmtpd's hook names)
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname  # left to a handler that has this hook
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_MAIL(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        # The null sender: a relay passing on a delivery report or an auto-reply.
        problem = address_problem(address, envelope.smtp_utf8, self.allowed, "5.1.7")
        if problem and address != NULL_SENDER:
            log.info("smtpd: MAIL FROM refused from %s: %s", _peer(session), problem)
            return problem
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 OK"

    async def handle_RCPT(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return f"452 4.5.3 Too many recipients: at most {MAX_RECIPIENTS} a mail"
        problem = address_problem(address, envelope.smtp_utf8, self.allowed, "5.1.3")
        if problem:
            log.info("smtpd: RCPT TO refused from %s: %s", _peer(session), problem)
            return problem
        if address not in envelope.rcpt_tos:  # named twice, sent once
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
        return "250 2.1.5 OK"

    async def handle_DATA(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        source = f"smtp:{session.auth_data}"
        peer, data = _peer(session), envelope.original_content or b""
        try:
            mail = Submitted(_sender(envelope), list(envelope.rcpt_tos), data, source)
            queued = await self.committer.store(mail)
        except Refused as exc:
            log.info("smtpd: mail from %s (%s) refused: %s", peer, source, exc.reply())
            return exc.reply()
        except DBAPIError as exc:
            log.error("smtpd: mail from %s (%s) not queued, the database cannot be reached: %s",
                      peer, source, type(exc.orig).__name__)  # fmt: skip
            return UNREACHABLE
        except Exception:
            log.exception("smtpd: mail from %s (%s) not queued", peer, source)
            return LOCAL_ERROR
        log.info("smtpd: queued %d (%s) from %s (%s) for %d recipients",
                 queued.id, queued.message_id, peer, source, len(envelope.rcpt_tos))  # fmt: skip
        return f"250 2.0.0 queued as {queued.id}"


def address_problem(
    address: str, smtputf8: bool, allowed: frozenset[str], status: str
) -> str | None:
    """The reply refusing an envelope address, or None if it is one checked address.

    Not ASCII is only for a mail that gave SMTPUTF8 (RFC 6531 3.4): 553 5.6.7 without.
    """
    if not address.isascii() and not smtputf8:
        return f"553 5.6.7 {address!r} is not ASCII: give SMTPUTF8 with MAIL FROM to use it"
    try:
        address.encode()
        found = addresses.parse([address], allowed)
    except UnicodeEncodeError:  # aiosmtpd keeps bytes that are not UTF-8 as surrogates
        return f"553 {status} {addresses.address_error(address, 'not UTF-8')}"
    except ValueError as exc:
        return f"553 {status} {exc}"
    if len(found) != 1 or found[0].name:
        return f"553 {status} {addresses.address_error(address, 'one bare address is needed')}"
    return None


def options(
    app: Flask, tls: ssl.SSLContext | None, timeout: float, *, implicit: bool = False
) -> dict[str, Any]:
    """Submission's settings from the app's: SIZE, SMTPUTF8, STARTTLS, AUTH over TLS only.

    implicit: the connection is TLS from its first byte (RFC 8314, port 465), so there is
    no STARTTLS to offer and AUTH is already over TLS.
    """
    return {
        "data_size_limit": app.config["MAX_MESSAGE_BYTES"],
        "enable_SMTPUTF8": True,
        "tls_context": None if implicit else tls,
        "auth_require_tls": not (implicit or app.config["SMTPD_ALLOW_PLAINTEXT_AUTH"]),
        "timeout": timeout,
    }


def listening(
    app: Flask, host: str, port: int, tls: ssl.SSLContext | None, timeout: float = IDLE_TIMEOUT,
    *, implicit: bool = False,
) -> Controller:  # fmt: skip
    """The server in a thread of this process (tests), on host:port from its return; stop() ends it.

    `outbox smtpd` serves the same protocol and handler in its main thread (outbox.smtp.server).
    implicit: TLS from the first byte with tls, as `--listen-tls` does.
    """
    settings = options(app, tls, timeout, implicit=implicit)
    return smtp_server.in_thread(Submission, Handler(app), host, port, settings,
                                 tls if implicit else None)  # fmt: skip
