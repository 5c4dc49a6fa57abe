"""A handed-over mail's header made ASCII for a server that takes no UTF-8 (RFC 6857 3.1).

Clients hand over headers holding UTF-8 without asking for SMTPUTF8: PHP's mail() through
msmtp writes a Subject or a display name as it was typed. When such a mail goes on to a
server offering no SMTPUTF8, each field holding UTF-8 is written again as RFC 6857
downgrades it: unstructured text as RFC 2047 encoded-words; in an address field, display
names as encoded-words, domains as A-labels, and an address whose local part is not ASCII
as an empty group named by the address (3.1.2); Content-Type and Content-Disposition
parameters in RFC 2231 form. Fields already ASCII keep their bytes. A field whose syntax
has no room for encoded text (a Message-ID, a Date, a Received) cannot be downgraded:
DowngradeError names it.
"""

import re
from email.message import Message
from email.utils import getaddresses

from outbox.core.addresses import Mailbox
from outbox.mail import encoding
from outbox.mail.mime import address_header

ADDRESSES = frozenset({
    "from", "sender", "reply-to", "to", "cc", "bcc", "resent-from", "resent-sender",
    "resent-to", "resent-cc", "resent-bcc", "disposition-notification-to",
    "return-receipt-to", "mail-followup-to", "mail-reply-to", "errors-to",
})  # fmt: skip
PARAMETERS = frozenset({"content-type", "content-disposition"})
# Fields of identifiers, dates and trace, where RFC 2047 words are not allowed.
OPAQUE = frozenset({
    "message-id", "in-reply-to", "references", "resent-message-id", "date", "resent-date",
    "received", "return-path", "content-id", "content-transfer-encoding", "mime-version",
    "dkim-signature", "arc-seal", "arc-message-signature", "arc-authentication-results",
    "authentication-results", "list-id", "list-unsubscribe", "list-unsubscribe-post",
})  # fmt: skip
FIELD = re.compile(rb"(?:[^\r\n]*\r\n)(?:[ \t][^\r\n]*\r\n)*")  # a field and its continuations
UNFOLD = re.compile(r"\r\n(?=[ \t])")


class DowngradeError(ValueError):
    """A field holding UTF-8 that cannot be written in ASCII; the message names it."""


def ascii_header(head: bytes) -> bytes:
    """head (header fields, each ending in CRLF) with every non-ASCII field in ASCII."""
    fields = FIELD.findall(head)
    if b"".join(fields) != head:
        raise DowngradeError("the header does not end its lines with CRLF")
    return b"".join(field if field.isascii() else _downgraded(field) for field in fields)


def _downgraded(field: bytes) -> bytes:
    name_bytes, colon, rest = field.partition(b":")
    if not colon or not name_bytes.isascii():
        raise DowngradeError(f"a field name holds UTF-8: {name_bytes[:40]!r}")
    name = name_bytes.decode().strip()
    try:
        value = UNFOLD.sub("", rest.decode()).strip(" \t\r\n")
    except UnicodeDecodeError:
        raise DowngradeError(f"the {name} field is neither ASCII nor UTF-8") from None
    key = name.lower()
    if key in OPAQUE:
        raise DowngradeError(f"the {name} field holds UTF-8 where no encoding is allowed")
    if key in ADDRESSES:
        return _addresses(name, value)
    if key in PARAMETERS:
        return _parameters(name, value)
    return encoding.unstructured(name, value)


def _addresses(name: str, value: str) -> bytes:
    """An address field, its mailboxes written for a server without SMTPUTF8."""
    found = getaddresses([value])
    if not found or any("@" not in address for _, address in found):
        raise DowngradeError(f"the {name} field holds UTF-8 and is not a list of addresses")
    listed = [Mailbox(address, display) for display, address in found]
    written, _ = address_header(name, listed, utf8=False)
    return written


def _parameters(name: str, value: str) -> bytes:
    """A Content-Type or Content-Disposition field, its parameters in RFC 2231 form."""
    parsed = Message()
    parsed[name] = value
    params = parsed.get_params(header=name, unquote=True) or []
    if not params or not params[0][0].isascii():
        raise DowngradeError(f"the {name} field's value holds UTF-8")
    pairs = []
    for key, text in params[1:]:
        if isinstance(text, tuple):  # already RFC 2231: (charset, language, value)
            text = text[2]
        if not key.isascii():
            raise DowngradeError(f"a parameter name of the {name} field holds UTF-8")
        pairs.append((key, str(text)))
    return encoding.fold(name, encoding.parameters(params[0][0], pairs))
