"""Complaints as mailbox providers send them, built from their published formats for the tests.

Yahoo's feedback loop sends RFC 5965 reports with the mail returned whole
(message/rfc822); Microsoft's JMRP sends the same shape with its own User-Agent and the
recipient redacted, and its older format is the mail alone, the recipient in
X-HmXmrOriginalRecipient; a generic RFC 5965 producer may return only the headers
(text/rfc822-headers). Every builder returns the raw bytes as the provider would send them.
"""

from email.utils import formatdate

DATE = formatdate(1795000000)
BOUNDARY = "arf_boundary_1795000000"


def returned_head(return_path: str, recipient: str, message_id: str,
                  feedback_id: str | None = None) -> str:  # fmt: skip
    """The head of the mail complained of, as the report returns it."""
    fbid = f"Feedback-ID: {feedback_id}\r\n" if feedback_id else ""
    return (f"Return-Path: <{return_path}>\r\nFrom: Shop <shop@example.com>\r\n"
            f"To: {recipient}\r\nSubject: Our January news\r\nMessage-ID: {message_id}\r\n"
            f"Date: {DATE}\r\n{fbid}MIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=us-ascii\r\n")  # fmt: skip


def _arf(head: str, text: str, fields: str, returned: str, returned_type: str) -> bytes:
    return (
        f"{head}MIME-Version: 1.0\r\n"
        "Content-Type: multipart/report; report-type=feedback-report;\r\n"
        f'\tboundary="{BOUNDARY}"\r\n'
        f"\r\nThis is a multi-part message in MIME format.\r\n\r\n--{BOUNDARY}\r\n"
        f"Content-Type: text/plain; charset=us-ascii\r\n\r\n{text}\r\n\r\n--{BOUNDARY}\r\n"
        f"Content-Type: message/feedback-report\r\n\r\n{fields}\r\n--{BOUNDARY}\r\n"
        f"Content-Type: {returned_type}\r\n\r\n{returned}\r\n--{BOUNDARY}--\r\n"
    ).encode()  # fmt: skip


def yahoo(to: str, return_path: str, recipient: str, message_id: str,
          feedback_id: str | None = None) -> bytes:  # fmt: skip
    """Yahoo's complaint feedback loop: ARF, the mail returned whole as message/rfc822."""
    head = (f"Return-Path: <>\r\nFrom: Yahoo! Mail AntiSpam Feedback <feedback@arf.mail.yahoo.com>"
            f"\r\nTo: {to}\r\nSubject: FW: Our January news\r\nDate: {DATE}\r\n"
            "Message-ID: <1795000000.abcdef@arf.mail.yahoo.com>\r\n")  # fmt: skip
    fields = ("Feedback-Type: abuse\r\nUser-Agent: Yahoo!-Mail-Feedback/2.0\r\nVersion: 0.1\r\n"
              f"Original-Mail-From: <{return_path}>\r\nOriginal-Rcpt-To: {recipient}\r\n"
              f"Received-Date: {DATE}\r\nReported-Domain: example.com\r\n"
              "Authentication-Results: mta1.mail.yahoo.com from=example.com; "
              "domainkeys=neutral; dkim=pass (ok)\r\n")  # fmt: skip
    body = f"{returned_head(return_path, recipient, message_id, feedback_id)}\r\nHello there\r\n"
    text = "This is an email abuse report for an email message from example.com on " + DATE
    return _arf(head, text, fields, body, "message/rfc822")


def jmrp(to: str, return_path: str, message_id: str, feedback_id: str | None = None) -> bytes:
    """Microsoft's JMRP in ARF: its User-Agent, the recipient redacted from report and mail."""
    head = (f"From: staff@hotmail.com\r\nTo: {to}\r\n"
            "Subject: complaint about message from 192.0.2.25\r\n"
            f"Date: {DATE}\r\nMessage-ID: <jmrp.1795000000@hotmail.com>\r\n")  # fmt: skip
    fields = ("Feedback-Type: abuse\r\nUser-Agent: Microsoft junk mail reporting/1.0\r\n"
              f"Version: 1\r\nOriginal-Mail-From: <{return_path}>\r\n"
              f"Arrival-Date: {DATE}\r\nSource-IP: 192.0.2.25\r\n")  # fmt: skip
    body = (f"{returned_head(return_path, 'redacted@outlook.com', message_id, feedback_id)}"
            "X-HmXmrOriginalRecipient: <redacted@outlook.com>\r\n\r\nHello there\r\n")  # fmt: skip
    text = "This is an email abuse report for an email message received from IP 192.0.2.25"
    return _arf(head, text, fields, body, "message/rfc822")


def jmrp_legacy(to: str, return_path: str, recipient: str, message_id: str) -> bytes:
    """Microsoft's older JMRP: the mail attached alone, its recipient in a header of its own."""
    return (
        f"From: staff@hotmail.com\r\nTo: {to}\r\nSubject: complaint about message from "
        f"192.0.2.25\r\nDate: {DATE}\r\nMIME-Version: 1.0\r\n"
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\r\n\r\n--{BOUNDARY}\r\n'
        "Content-Type: text/plain\r\n\r\nA complaint from a user.\r\n\r\n"
        f"--{BOUNDARY}\r\nContent-Type: message/rfc822\r\n\r\n"
        f"X-HmXmrOriginalRecipient: <{recipient}>\r\n"
        f"{returned_head(return_path, recipient, message_id)}\r\nHello there\r\n"
        f"--{BOUNDARY}--\r\n"
    ).encode()


def headers_only(to: str, return_path: str, recipient: str | None, message_id: str,
                 feedback_id: str | None = None) -> bytes:  # fmt: skip
    """A generic RFC 5965 producer's report: the returned mail's headers alone."""
    head = (f"From: Abuse desk <abuse@isp.example.net>\r\nTo: {to}\r\nSubject: Abuse report"
            f"\r\nDate: {DATE}\r\nMessage-ID: <r1@isp.example.net>\r\n")  # fmt: skip
    rcpt = f"Original-Rcpt-To: <{recipient}>\r\n" if recipient else ""
    fields = (f"Feedback-Type: abuse\r\nUser-Agent: SomeGenerator/1.0\r\nVersion: 1\r\n"
              f"Original-Mail-From: <{return_path}>\r\n{rcpt}Arrival-Date: {DATE}\r\n")  # fmt: skip
    body = returned_head(return_path, recipient or "undisclosed-recipients:;", message_id,
                         feedback_id)  # fmt: skip
    return _arf(head, "An abuse report.", fields, body, "text/rfc822-headers")
