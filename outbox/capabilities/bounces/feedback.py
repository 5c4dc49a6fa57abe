"""Reading a complaint: an ARF feedback report (RFC 5965) a mailbox provider sends back.

A report is a multipart/report; report-type=feedback-report with a message/feedback-report
part (Feedback-Type, User-Agent, Original-Rcpt-To, Original-Mail-From, Arrival-Date) and
the returned mail, whole (message/rfc822) or its headers (text/rfc822-headers). Microsoft's
older JMRP mails carry no such part: the returned mail alone, with the recipient in its
X-HmXmrOriginalRecipient header. Pure: no database, no Flask.
"""

import email
import email.policy
import re
from dataclasses import dataclass
from email.message import Message

FEEDBACK_PART = "message/feedback-report"
RETURNED = ("message/rfc822", "message/global", "message/rfc822-headers")
RETURNED_HEADERS = ("text/rfc822-headers", "text/rfc822-header")
JMRP_RECIPIENT = "X-HmXmrOriginalRecipient"  # Microsoft's old format names the recipient so
FIELD_CHARS = 200  # a report's field is cut to this many characters
ADDRESS = re.compile(r"<?([^<>\s@]+@[^<>\s@]+)>?")


@dataclass(frozen=True)
class Complaint:
    """What a feedback report says: of which mail, from whom, of what type."""

    feedback_type: str  # abuse, fraud, virus, other, not-spam...
    user_agent: str  # the reporting system: "Yahoo!-Mail-Feedback/2.0"
    recipient: str | None  # Original-Rcpt-To (often redacted by the provider)
    mail_from: str | None  # Original-Mail-From: the return path the mail went with
    arrival_date: str | None
    return_path: str | None  # the returned mail's Return-Path
    feedback_id: str | None  # the returned mail's Feedback-ID

    @property
    def said(self) -> str:
        """The report in a few words, for a recipient's entry and the suppression list."""
        by = f" from {self.user_agent}" if self.user_agent else ""
        return f"{self.feedback_type} report{by}"[:FIELD_CHARS]


def report(mail: Message) -> Complaint | None:
    """The complaint a mail is, or None if it is no feedback report."""
    fields, returned = _feedback_fields(mail), _returned_headers(mail)
    if fields is None:
        if returned is None or returned.get(JMRP_RECIPIENT) is None:
            return None
        fields = {"feedback-type": "abuse", "user-agent": "Microsoft JMRP"}
        fields["original-rcpt-to"] = str(returned[JMRP_RECIPIENT])
    returned = returned if returned is not None else Message()
    return Complaint(
        feedback_type=(fields.get("feedback-type") or "abuse").lower()[:16],
        user_agent=fields.get("user-agent") or "",
        recipient=_address(fields.get("original-rcpt-to")),
        mail_from=_address(fields.get("original-mail-from")),
        arrival_date=fields.get("arrival-date") or fields.get("received-date"),
        return_path=_address(_text(returned.get("Return-Path"))),
        feedback_id=_text(returned.get("Feedback-ID")),
    )


def _feedback_fields(mail: Message) -> dict[str, str] | None:
    """The fields of the message/feedback-report part, names in lower case; the first of each."""
    for part in mail.walk():
        if part.get_content_type() != FEEDBACK_PART:
            continue
        payload = part.get_payload()
        blocks = payload if isinstance(payload, list) else [email.message_from_string(str(payload))]
        fields: dict[str, str] = {}
        for block in blocks:
            if isinstance(block, Message):
                for name, value in block.items():
                    fields.setdefault(name.lower(), " ".join(str(value).split())[:FIELD_CHARS])
        return fields
    return None


def _returned_headers(mail: Message) -> Message | None:
    """The headers of the mail a report returns: its message/rfc822 or text/rfc822-headers."""
    for part in mail.walk():
        kind = part.get_content_type()
        if kind in RETURNED:
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            if isinstance(inner, Message):
                return inner
        if kind in RETURNED_HEADERS:
            payload = part.get_payload(decode=True)
            text = payload if isinstance(payload, bytes) else b""
            return email.message_from_bytes(text, policy=email.policy.compat32)
    return None


def _text(value: object) -> str | None:
    if value is None:
        return None
    return " ".join(str(value).split())[:FIELD_CHARS] or None


def _address(value: str | None) -> str | None:
    """The address in a report's field ("<ann@example.com>", "rfc822; ann@example.com")."""
    if not value:
        return None
    found = ADDRESS.search(value.rpartition(";")[2])
    return found[1] if found else None
