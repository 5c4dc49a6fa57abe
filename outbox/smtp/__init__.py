"""SMTP on the wire; here, opening a connection: a timeout, TLS that checks the server,
UTF-8 logins.
"""

import base64
import functools
import hmac
import logging
import smtplib
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("outbox.smtp")

# What smtplib.SMTP.login tries, in its order; said when a server offers none of them.
MECHANISMS = ("CRAM-MD5", "PLAIN", "LOGIN")


class HostError(Exception):
    """The SMTP server or outbox's settings for it are at fault, not a message.

    str() names the problem and the host; code is the server's reply code, if one came.
    """

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.code = code


class SettingsError(HostError):
    """Outbox's own settings forbid or cannot make the connection."""


class TlsError(HostError):
    """The TLS channel could not be made, or not with the server the settings name."""


@dataclass(frozen=True)
class HostSettings:
    """Where and how to connect: Flask-Mail's MAIL_* settings and outbox's own."""

    server: str
    port: int
    timeout: float  # seconds one socket operation may take
    use_ssl: bool = False
    use_tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    verify: bool = True
    ca_file: str | None = None
    allow_plaintext_auth: bool = False

    @classmethod
    def of(cls, mail: Any, config: Mapping[str, Any]) -> "HostSettings":
        """The settings of Flask-Mail's state `mail` and the app's config."""
        return cls(
            server=mail.server, port=mail.port, timeout=config["SMTP_TIMEOUT"],
            use_ssl=mail.use_ssl, use_tls=mail.use_tls,
            username=mail.username, password=mail.password,
            verify=config["MAIL_TLS_VERIFY"], ca_file=config["MAIL_TLS_CA_FILE"] or None,
            allow_plaintext_auth=config["MAIL_ALLOW_PLAINTEXT_AUTH"],
        )  # fmt: skip

    @property
    def where(self) -> str:
        return f"{self.server}:{self.port}"

    @property
    def logs_in(self) -> bool:
        return bool(self.username and self.password)


def open_host(settings: HostSettings) -> smtplib.SMTP:
    """Connect, make TLS (checked unless MAIL_TLS_VERIFY is off) and log in.

    Raises HostError (SettingsError, TlsError) for every fault of the server or of the
    settings, the password is never sent over a connection without TLS unless
    MAIL_ALLOW_PLAINTEXT_AUTH says so, and MAIL_USE_TLS never falls back to plaintext.
    """
    where = settings.where
    if settings.logs_in and not _encrypted(settings) and not settings.allow_plaintext_auth:
        raise SettingsError(
            f"refusing to send the SMTP password over an unencrypted connection to {where}; "
            "set OUTBOX_MAIL_USE_TLS=true or OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH=true"
        )
    context = tls_context(settings.verify, settings.ca_file) if _encrypted(settings) else None
    try:
        if settings.use_ssl:
            host: smtplib.SMTP = SslHost(
                settings.server, settings.port, timeout=settings.timeout, context=context
            )
        else:
            host = Host(settings.server, settings.port, timeout=settings.timeout)
    except (OSError, smtplib.SMTPException) as exc:
        raise explain(exc, settings) from exc
    try:
        if settings.use_tls and not settings.use_ssl:
            _starttls(host, context, where)
        if settings.logs_in:
            _login(host, settings)
    except BaseException as exc:
        host.close()
        if isinstance(exc, OSError | smtplib.SMTPException):
            raise explain(exc, settings) from exc
        raise
    return host


def _encrypted(settings: HostSettings) -> bool:
    return settings.use_ssl or settings.use_tls


def _starttls(host: smtplib.SMTP, context: ssl.SSLContext | None, where: str) -> None:
    try:
        host.starttls(context=context)
    except smtplib.SMTPNotSupportedError:
        raise TlsError(
            f"{where} does not offer STARTTLS, which OUTBOX_MAIL_USE_TLS requires; "
            "nothing was sent without it"
        ) from None
    except smtplib.SMTPResponseException as exc:
        raise TlsError(f"{where} refused STARTTLS: {_reply(exc)}", exc.smtp_code) from exc


def _login(host: smtplib.SMTP, settings: HostSettings) -> None:
    where, user = settings.where, settings.username
    assert user is not None and settings.password is not None
    host.ehlo_or_helo_if_needed()
    if not host.has_extn("auth"):
        raise HostError(f"{where} does not offer AUTH, and OUTBOX_MAIL_USERNAME is set")
    offered = host.esmtp_features["auth"].split()
    if not set(offered) & set(MECHANISMS):
        raise HostError(
            f"{where} offers no AUTH mechanism outbox speaks ({', '.join(MECHANISMS)}): "
            f"{' '.join(offered)}"
        )
    try:
        host.login(user, settings.password)
    except smtplib.SMTPAuthenticationError as exc:
        text = f"{where} refused the login of {user}: {_reply(exc)}"
        raise HostError(text, exc.smtp_code) from exc


def explain(exc: OSError | smtplib.SMTPException, settings: HostSettings) -> HostError:
    """A connection fault told as a HostError naming the problem and the host."""
    where = settings.where
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(f"TLS certificate of {where} not trusted: {exc.verify_message}")
    if isinstance(exc, ssl.SSLError):
        return TlsError(f"TLS with {where} failed: {exc.reason or exc}")
    # smtplib tells a reply that never came as a disconnection.
    if isinstance(exc, TimeoutError) or isinstance(exc.__context__, TimeoutError):
        return HostError(f"{where} timed out: no answer within {settings.timeout:g}s")
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return HostError(f"{where} closed the connection: {exc}")
    if isinstance(exc, smtplib.SMTPResponseException):
        return HostError(f"{where} answered {_reply(exc)}", exc.smtp_code)
    if isinstance(exc, OSError):
        return HostError(f"cannot connect to {where}: {exc.strerror or exc}")
    return HostError(f"{where}: {exc}")


def _reply(exc: smtplib.SMTPResponseException) -> str:
    text = exc.smtp_error
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return f"{exc.smtp_code} {text}"


@functools.lru_cache(maxsize=8)
def tls_context(verify: bool, ca_file: str | None) -> ssl.SSLContext:
    """The client context: the system's trust store and ca_file's CAs, host names checked.

    Made once per process and setting (the trust store takes some 20 ms to load): a
    changed CA file is read when the workers start again.
    """
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except OSError as exc:  # ssl.SSLError too: no certificate in it
            raise SettingsError(f"OUTBOX_MAIL_TLS_CA_FILE {ca_file} cannot be used: {exc}") from exc
    return context


def warn_unsafe(config: Mapping[str, Any]) -> None:
    """Log a warning for each TLS safeguard the settings turn off; once per worker start."""
    where = f"{config['MAIL_SERVER']}:{config['MAIL_PORT']}"
    if not config["MAIL_TLS_VERIFY"]:
        log.warning(
            "OUTBOX_MAIL_TLS_VERIFY is off: the TLS certificate and host name of %s are not "
            "checked, and whoever answers gets the mail and the SMTP password", where
        )  # fmt: skip
    if config["MAIL_ALLOW_PLAINTEXT_AUTH"]:
        log.warning(
            "OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH is on: the SMTP password may go to %s "
            "unencrypted", where
        )  # fmt: skip


class Host(smtplib.SMTP):
    """smtplib's client, logging in with UTF-8 user names and passwords, writing at once.

    smtplib encodes them as ASCII and fails on anything else; AUTH PLAIN is UTF-8
    (RFC 4616), and servers take LOGIN and CRAM-MD5 the same way.
    """

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        # No Nagle: a mail's last write would otherwise wait for the server's ACK of the
        # one before, which a server may hold back for its delayed-ACK timer (40 ms).
        sock: socket.socket = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def auth(
        self, mechanism: str, authobject: Callable[..., Any], *,
        initial_response_ok: bool = True,
    ) -> tuple[int, bytes]:  # fmt: skip
        # smtplib's own, but for the encoding of what authobject returns.
        mechanism = mechanism.upper()
        initial = authobject() if initial_response_ok else None
        if initial is not None:
            code, resp = self.docmd("AUTH", f"{mechanism} {_b64(initial)}")
            self._auth_challenge_count = 1
        else:
            code, resp = self.docmd("AUTH", mechanism)
            self._auth_challenge_count = 0
        while code == 334:
            self._auth_challenge_count += 1
            if self._auth_challenge_count > smtplib._MAXCHALLENGE:  # type: ignore[attr-defined]
                raise smtplib.SMTPException(f"AUTH {mechanism} challenges without end: {resp!r}")
            code, resp = self.docmd(_b64(authobject(base64.decodebytes(resp))))
        if code in (235, 503):
            return code, resp
        raise smtplib.SMTPAuthenticationError(code, resp)

    def auth_cram_md5(self, challenge: bytes | None = None) -> str | None:  # type: ignore[override]
        if challenge is None:
            return None
        digest = hmac.HMAC(self.password.encode("utf-8"), challenge, "md5").hexdigest()
        return f"{self.user} {digest}"


class SslHost(Host, smtplib.SMTP_SSL):
    """smtplib's implicit-TLS client with Host's UTF-8 login."""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")
