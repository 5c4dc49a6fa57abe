"""Reading a bounce mail: which recipients failed, how hard, and which message it returns.

RFC 3464 delivery status notifications (multipart/report; report-type=delivery-status)
are read with the email package, one recipient block at a time. Anything else goes to
flufl.bounce, which knows the failed addresses of many MTAs' own formats (Exim,
qmail, old Exchange, ...) and whether each failure is permanent. A mail that is an
auto-reply (Auto-Submitted: auto-replied from a person, X-Autoreply, Precedence:
auto_reply, an out-of-office subject) is not a bounce. A feedback report (a complaint,
RFC 5965) is read by feedback.py and is of its own kind. Pure: no database, no Flask.
"""

import email
import email.errors
import email.header
import email.policy
import logging
import re
from dataclasses import dataclass, field
from email.message import Message

from flufl.bounce import all_failures

from outbox.capabilities.bounces import feedback

HARD, SOFT, AUTO_REPLY, UNPARSED, OTHER = "hard", "soft", "auto-reply", "unparsed", "other"
COMPLAINT = "complaint"
STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
SMTP_CODE = re.compile(r"^\s*(?:smtp\s*;\s*)?([245]\d\d)\b[ -]?", re.IGNORECASE)
DIAGNOSTIC_TYPE = re.compile(r"^\s*(?:smtp|x-[\w-]+)\s*;\s*", re.IGNORECASE)
MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(<[^>\s]+>)", re.IGNORECASE | re.MULTILINE)
OUT_OF_OFFICE = re.compile(
    r"out of (the )?office|auto(matic)?[- ]?reply|autoreply|abwesenheit|absence|vacation|"
    r"r[ée]ponse automatique",
    re.IGNORECASE,
)
MAILER = re.compile(r"mailer-daemon|postmaster|mail delivery (sub)?system", re.IGNORECASE)
DIAGNOSTIC_CHARS = 2000
# flufl.bounce logs a line at INFO for every detector it runs on every mail.
logging.getLogger("flufl.bounce").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Failure:
    """One recipient a bounce mail reports on."""

    address: str  # the Final-Recipient (or the failed address flufl found)
    original: str | None  # the Original-Recipient, when the DSN gives it
    action: str  # failed, delayed, delivered, relayed, expanded
    status: str | None  # the DSN status code: 5.1.1
    diagnostic: str | None  # the remote server's words: "smtp; 550 5.1.1 No such user"
    hard: bool

    @property
    def smtp_code(self) -> int | None:
        """The SMTP reply code inside the diagnostic, if it names one."""
        found = SMTP_CODE.match(self.diagnostic or "")
        return int(found[1]) if found else None

    @property
    def said(self) -> str:
        """The remote server's words without the diagnostic's type and the SMTP code."""
        text = self.diagnostic or ""
        found = SMTP_CODE.match(text)
        text = text[found.end() :] if found else DIAGNOSTIC_TYPE.sub("", text)
        return text.strip() or self.status or "bounced"


@dataclass
class Read:
    """What a bounce mail turned out to be."""

    kind: str  # hard, soft, complaint, auto-reply, unparsed or other
    failures: list[Failure] = field(default_factory=list)
    message_id: str | None = None  # the returned mail's own Message-ID, as sent
    subject: str = ""
    from_header: str = ""
    to_headers: list[str] = field(default_factory=list)  # To, Delivered-To, X-Original-To...
    complaint: feedback.Complaint | None = None  # what a feedback report says


def read(raw: bytes) -> Read:
    """Read one raw bounce mail; never raises for what the mail holds."""
    mail = email.message_from_bytes(raw, policy=email.policy.compat32)
    found = Read(UNPARSED, subject=_header(mail, "Subject"), from_header=_header(mail, "From"))
    for name in ("Delivered-To", "X-Original-To", "Envelope-To", "X-Envelope-To", "To"):
        found.to_headers += [str(value) for value in mail.get_all(name, [])]
    found.message_id = _returned_message_id(mail, raw)
    found.complaint = feedback.report(mail)
    if found.complaint is not None:
        found.kind = COMPLAINT
        return found
    status = _delivery_status(mail)
    if status is not None:
        found.failures = _dsn_failures(status)
    elif not _auto_reply(mail):
        found.failures = _flufl_failures(mail)
    elif not MAILER.search(found.from_header):
        found.kind = AUTO_REPLY
        return found
    else:
        found.failures = _flufl_failures(mail)
    found.kind = _kind(found.failures)
    return found


def _kind(failures: list[Failure]) -> str:
    if any(f.hard for f in failures):
        return HARD
    if any(f.action in ("failed", "delayed") for f in failures):
        return SOFT
    return OTHER if failures else UNPARSED


def _header(mail: Message, name: str) -> str:
    value = mail.get(name)
    if value is None:
        return ""
    try:
        decoded = email.header.make_header(email.header.decode_header(str(value)))
        return str(decoded)[:998]
    except (LookupError, UnicodeError, ValueError, email.errors.HeaderParseError):
        return str(value)[:998]


def _auto_reply(mail: Message) -> bool:
    """Whether the mail says it is an automatic answer to a person's mail."""
    auto = str(mail.get("Auto-Submitted", "")).strip().lower()
    precedence = str(mail.get("Precedence", "")).strip().lower()
    return (auto.startswith("auto-replied") or precedence == "auto_reply"
            or any(mail.get(h) is not None for h in ("X-Autoreply", "X-Autorespond"))
            or bool(OUT_OF_OFFICE.search(_header(mail, "Subject"))))  # fmt: skip


def _delivery_status(mail: Message) -> Message | None:
    """The message/delivery-status part of an RFC 3464 report, if the mail is one."""
    for part in mail.walk():
        if part.get_content_type() in ("message/delivery-status", "message/global-delivery-status"):
            return part
    return None


def _dsn_failures(report: Message) -> list[Failure]:
    """One Failure per recipient block of the report (the first block is the message's)."""
    payload = report.get_payload()
    if isinstance(payload, list):
        blocks = [block for block in payload if isinstance(block, Message)]
    else:  # a parser that did not split it: parse the text
        text = str(payload)
        blocks = [email.message_from_string(b) for b in re.split(r"\r?\n\r?\n", text) if b.strip()]
    failures = []
    for block in blocks:
        final = _address(block.get("Final-Recipient")) or _address(block.get("Original-Recipient"))
        if not final:
            continue
        action = str(block.get("Action", "")).strip().lower()
        status_found = STATUS.search(str(block.get("Status", "")))
        status = status_found.group(0) if status_found else None
        diagnostic = " ".join(str(block.get("Diagnostic-Code", "")).split()) or None
        if diagnostic:
            diagnostic = diagnostic[:DIAGNOSTIC_CHARS]
        hard = action == "failed" and status is not None and status.startswith("5")
        original = _address(block.get("Original-Recipient"))
        failures.append(Failure(final, original, action or "failed", status, diagnostic, hard))
    return failures


def _address(value: object) -> str | None:
    """The address of an RFC 3464 recipient field ("rfc822; ann@example.com")."""
    if value is None:
        return None
    kind, semi, address = str(value).partition(";")
    address = (address if semi else kind).strip().strip("<>").strip()
    return address or None


def _flufl_failures(mail: Message) -> list[Failure]:
    """The failed addresses flufl.bounce finds in a non-standard bounce, and how hard."""
    try:
        temporary, permanent = all_failures(mail)
    except Exception:  # a detector that trips over an odd mail: nothing found
        return []
    found = []
    for addresses, hard in ((permanent, True), (temporary - permanent, False)):
        for address in sorted(addresses):
            text = address.decode(errors="replace") if isinstance(address, bytes) else address
            diagnostic = _diagnostic_near(mail, text)
            status_found = STATUS.search(diagnostic or "")
            status = status_found.group(0) if status_found else ("5.0.0" if hard else "4.0.0")
            found.append(Failure(text, None, "failed" if hard else "delayed", status,
                                 diagnostic, hard))  # fmt: skip
    return found


def _diagnostic_near(mail: Message, address: str) -> str | None:
    """The lines that follow the address in the bounce's first text part: the server's words."""
    for part in mail.walk():
        if part.get_content_type() != "text/plain":
            continue
        payload = part.get_payload(decode=True)
        text = payload.decode(errors="replace") if isinstance(payload, bytes) else ""
        text = text.replace("\r\n", "\n")
        at = text.lower().find(address.lower())
        if at < 0:
            continue
        after = text[at + len(address) :].split("\n\n")[0]
        said = " ".join(after.split()).strip(" :")
        return said[:DIAGNOSTIC_CHARS] or None
    return None


def _returned_message_id(mail: Message, raw: bytes) -> str | None:
    """The Message-ID of the mail that bounced, from the headers the bounce returns.

    In a report, its message/rfc822 or text/rfc822-headers part; otherwise the first
    Message-ID line in the body (Exim quotes the mail after its text): never the
    bounce's own Message-ID header.
    """
    for part in mail.walk():
        kind = part.get_content_type()
        if kind in ("message/rfc822", "message/global", "message/rfc822-headers"):
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            if isinstance(inner, Message) and inner.get("Message-ID"):
                return str(inner["Message-ID"]).strip()
        if kind in ("text/rfc822-headers", "text/rfc822-header"):
            payload = part.get_payload(decode=True)
            found = MESSAGE_ID.search(payload if isinstance(payload, bytes) else b"")
            if found:
                return found[1].decode(errors="replace")
    head_end = raw.find(b"\r\n\r\n")
    head_end = raw.find(b"\n\n") if head_end < 0 else head_end
    found = MESSAGE_ID.search(raw, max(head_end, 0))
    return found[1].decode(errors="replace") if found else None
