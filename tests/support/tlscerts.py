"""TLS for the tests: a private CA, its certificates, a recording SMTP server with STARTTLS."""

import hmac
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.smtp import SMTP, AuthResult, auth_mechanism

from .smtpd import Recorder, RecordingController, RecordingSMTP, free_port

USER, PASSWORD = "ann", "pässwörd✓"


class CramSMTP(RecordingSMTP):
    """The recording server, also offering CRAM-MD5 (RFC 2195)."""

    @auth_mechanism("CRAM-MD5")
    async def auth_CRAM_MD5(self, _, args):  # type: ignore[no-untyped-def]  # noqa: N802
        challenge = f"<{time.monotonic_ns()}@outbox.test>".encode()
        answer = await self.challenge_auth(challenge)
        user, digest = answer.rsplit(b" ", 1)
        return self._authenticate("CRAM-MD5", (user, digest.decode(), challenge))


@dataclass
class Logins:
    """aiosmtpd authenticator: takes user and PASSWORD, records every attempt."""

    user: str = USER
    seen: list[tuple[str, bytes, bool]] = field(default_factory=list)  # mechanism, user, TLS?

    def __call__(self, server, session, envelope, mechanism, data) -> AuthResult:  # type: ignore[no-untyped-def]
        encrypted = server.transport.get_extra_info("ssl_object") is not None
        if mechanism == "CRAM-MD5":
            user, digest, challenge = data
            key = PASSWORD.encode()
            right = hmac.compare_digest(digest, hmac.HMAC(key, challenge, "md5").hexdigest())
        else:
            user, right = data.login, data.password == PASSWORD.encode()
        self.seen.append((mechanism, user, encrypted))
        ok = right and user == self.user.encode()
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd answers 535


class TlsController(RecordingController):
    def factory(self) -> SMTP:
        return CramSMTP(self.handler, **self.SMTP_kwargs)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def good_cert(ca: trustme.CA) -> Any:
    return ca.issue_cert("127.0.0.1", "localhost")


class Server:
    """A recording aiosmtpd server on loopback: STARTTLS, implicit TLS or none, with AUTH."""

    def __init__(
        self, mode: str | None, cert: Any = None, user: str = USER, **smtp_kwargs: Any
    ) -> None:
        self.recorder, self.logins, self.port = Recorder(), Logins(user), free_port()
        context = None
        if cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            cert.configure_cert(context)
        kwargs: dict[str, Any] = {"authenticator": self.logins, **smtp_kwargs}
        if mode == "starttls":
            kwargs["tls_context"] = context
        elif mode == "ssl":
            kwargs |= {"ssl_context": context, "auth_require_tls": False}  # TLS from the start
        self.controller = TlsController(self.recorder, hostname="127.0.0.1", port=self.port,
                                        **kwargs)  # fmt: skip

    def __enter__(self) -> "Server":
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


def point_at(app, server: Server, mode: str | None, **config: Any) -> None:  # type: ignore[no-untyped-def]
    """Set the app's MAIL_* settings and Flask-Mail's copy of them."""
    values = {"MAIL_PORT": server.port, "MAIL_USE_TLS": mode == "starttls",
              "MAIL_USE_SSL": mode == "ssl", **config}  # fmt: skip
    app.config.update(values)
    state = app.extensions["mail"]
    for name, value in values.items():
        attribute = name.removeprefix("MAIL_").lower()
        if hasattr(state, attribute):
            setattr(state, attribute, value)
