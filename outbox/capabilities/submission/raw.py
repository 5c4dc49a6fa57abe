"""A mail handed over by SMTP, sent as it came: its stored bytes are the DATA.

The envelope is the submission's: MAIL FROM (or the recipient's VERP return path when
bounces are on; never for the null sender, whose bounces go nowhere) and the recipients
still pending. A server that offers no 8BITMIME gets 8-bit body parts re-encoded as
quoted-printable (RFC 6152 section 3: a relay converts or refuses); a header holding UTF-8
goes as it is to a server offering SMTPUTF8, and downgraded to ASCII (RFC 6857) to one
that does not (outbox.mail.downgrade).
"""

import io
from dataclasses import dataclass, field
from email import encoders, message_from_bytes, policy
from email.generator import BytesGenerator
from typing import Any

from sqlalchemy import select

from outbox.capabilities.dkim import keyring
from outbox.core.deliveries import pending
from outbox.mail import downgrade, signing
from outbox.mail.mime import BuildError, envelope, wire_address
from outbox.mail.rendered import Features, Prepared, Rendered
from outbox.mail.signing import Signer
from outbox.models import RawChunk
from outbox.models.db import db
from outbox.queue.attachments import Damaged

# The generator writes lines as they were parsed (no refolding), with CRLF.
SEVEN_BIT = policy.compat32.clone(linesep="\r\n", max_line_length=0)


@dataclass
class RawMail:
    """A stored raw mail made ready for any server; for_server() finishes it for one."""

    envelope_from: str
    pending: list[str]
    data: bytes
    signers: tuple[Signer, ...] = ()
    returns: dict[str, str] | None = None  # bounces: VERP return paths
    made: dict[Features, Prepared] = field(default_factory=dict)

    def for_server(self, features: Features) -> Prepared:
        made = self.made.get(features)
        if made is None:
            made = self.made[features] = self._made_for(features)
        return made

    def _made_for(self, features: Features) -> Prepared:
        utf8 = features.smtputf8
        try:
            sender = wire_address(self.envelope_from, utf8) if self.envelope_from else ""
        except ValueError as exc:
            raise BuildError(f"sender: {exc}") from None
        recipients, stored, unsendable = envelope(self.pending, utf8)
        end = self.data.find(b"\r\n\r\n")
        head = self.data if end < 0 else self.data[: end + 2]
        data = self.data
        if not head.isascii() and not utf8:
            try:
                head = downgrade.ascii_header(head)
            except downgrade.DowngradeError as exc:
                said = f"the server does not offer SMTPUTF8 (RFC 6531) and {exc}"
                raise BuildError(f"{said}; a server that offers it takes the mail") from None
            data = head if end < 0 else head + self.data[end + 2 :]
        eight_bit = not data.isascii()
        if eight_bit and not features.eight_bit:
            data, eight_bit = seven_bit(data), False
        utf8_used = not head.isascii() or not sender.isascii()
        utf8_used |= not all(r.isascii() for r in recipients)
        rendered = Rendered([data], [], eight_bit, utf8_used)
        if self.signers:  # dkim: last, over what this server gets
            rendered = signing.signed(rendered, self.signers)
        return Prepared(sender, recipients, stored, rendered, unsendable)


def seven_bit(data: bytes) -> bytes:
    """The mail with each 8-bit leaf part re-encoded (text: quoted-printable, else base64),
    the rest as it was."""
    try:
        mail = message_from_bytes(data, policy=SEVEN_BIT)
        for part in mail.walk():
            if part.is_multipart():
                continue
            body = part.get_payload(decode=True)
            if isinstance(body, bytes) and not body.isascii():
                del part["Content-Transfer-Encoding"]
                if part.get_content_maintype() == "text":  # its lines stay lines
                    part.set_payload(body.replace(b"\r\n", b"\n"))
                    encoders.encode_quopri(part)
                else:
                    part.set_payload(body)
                    encoders.encode_base64(part)
        out = io.BytesIO()
        BytesGenerator(out, mangle_from_=False, policy=SEVEN_BIT).flatten(mail)
    except Exception as exc:  # the email package on a mail it cannot take apart
        raise BuildError(f"cannot re-encode the 8-bit mail for a server without 8BITMIME: "
                         f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    written = out.getvalue()
    if not written.isascii():
        raise BuildError("the server does not offer 8BITMIME and the mail holds 8-bit octets "
                         "outside any body part")  # fmt: skip
    return written


def read(message_pk: int, size: int) -> bytes:
    """A raw mail's bytes, a chunk at a time; Damaged if they do not add up to its size."""
    chunks = select(RawChunk.data).where(RawChunk.message_pk == message_pk)
    buffer = io.BytesIO()
    for chunk in db.session.scalars(
        chunks.order_by(RawChunk.seq), execution_options={"yield_per": 1}
    ):
        buffer.write(chunk)
    data = buffer.getvalue()
    if len(data) != size:
        raise Damaged(f"the stored mail holds {len(data)} of its {size} bytes")
    return data


def prepare(row: Any) -> RawMail:
    """What every server gets of a raw row's mail (batch._prepare calls it for raw rows)."""
    data = read(row.id, row.raw_size)
    db.session.commit()
    return RawMail(
        envelope_from=row.envelope_from,
        pending=[e.address for e in pending(list(row.recipients or []))],
        data=data,
        signers=keyring.signers_for(row.from_addr),
    )
