"""A second implementation of SMTP.sendmail, kept for speed; test_pipelining holds it to smtplib."""

import contextlib
import re
import smtplib

from outbox.mail.rendered import Prepared, Rendered

# RCPT replies that mean "no more recipients in this transaction" (RFC 5321 4.5.3.1.10:
# a 552 there is to be taken as the 452 it should have been): those recipients go in a
# further transaction, and the next mail's commands wait for it.
TOO_MANY = frozenset({452, 552})
# A mail's content goes out in writes of about this many bytes: a small mail in one,
# with its final dot (a write per piece cost a system call and a packet each).
WRITE_BYTES = 64 * 1024
# smtplib's dot-stuffing: a line that starts with "." gets another.
LINE_DOT = re.compile(rb"(?m)^\.")


class DataRefused(smtplib.SMTPDataError):
    """The server refused the content at its final dot; the transaction is over."""


class Refused(dict[str, tuple[int, bytes]]):
    """What sendmail returns, as smtplib's does: the refused recipients by address.

    It also keeps the server's reply to the final dot ("2.0.0 Ok: queued as 4Xk2"), which
    smtplib drops: the attempt records it, at the cost of one attribute.
    """

    reply: bytes = b""


def sendmail(
    host: smtplib.SMTP,
    sender: str,
    recipients: list[str],
    data: Rendered,
    *,
    written: bool = False,
    then: bytes = b"",
) -> Refused:
    """smtplib's SMTP.sendmail, pipelined where the server allows, sending the DATA in pieces.

    smtplib waits for the answer to MAIL, to each RCPT and to DATA before it sends the
    next; a server that offers PIPELINING (RFC 2920; Postfix, Exim and most others do)
    takes them all in one write, which saves a round trip per command. smtplib also
    makes three whole copies of a message on its way out; here each piece is
    dot-stuffed and sent on its own. The rest is sendmail's: the same commands, the same
    RSET or close, the same exceptions, and the refused recipients when some but not all
    are refused.

    `written`: this mail's commands went out already, in `then` of the mail before.
    `then`: commands of the next mail, written with the final dot (RFC 2920 lets the
    content open a group). When they were written, a refusal at the dot raises
    DataRefused with no RSET after it: the server reads the next mail's commands next.
    """
    host.ehlo_or_helo_if_needed()
    host.command_encoding = "utf-8" if data.smtputf8 else "ascii"
    commands = _envelope(host, sender, recipients, data)
    pipelined = pipelines(host)
    if pipelined and not written:
        host.send(_group(commands))
    replies = iter(commands[1:])
    code, reply = _reply(host, commands[0], pipelined)
    if code != 250 and not pipelined:
        _end_transaction(host, code)
        raise smtplib.SMTPSenderRefused(code, reply, sender)
    sender_refused = (code, reply) if code != 250 else None
    if code == 421:
        host.close()
        raise smtplib.SMTPSenderRefused(code, reply, sender)
    refused = Refused()
    for recipient, command in zip(recipients, replies, strict=True):
        code, reply = _reply(host, command, pipelined)
        if code not in (250, 251):
            refused[recipient] = (code, reply)
        if code == 421:
            host.close()
            if sender_refused:  # the transaction was over before this RCPT: smtplib never sends it
                raise smtplib.SMTPSenderRefused(*sender_refused, sender)
            raise smtplib.SMTPRecipientsRefused(refused)
    if len(refused) == len(recipients) and not pipelined:
        _rset(host)
        raise smtplib.SMTPRecipientsRefused(refused)
    code, reply = _reply(host, "data", pipelined)
    if sender_refused or len(refused) == len(recipients):
        if code == 354:  # a server that took DATA with no one to deliver to: end it empty
            host.send(b".\r\n")
            host.getreply()
        if code == 421:
            host.close()
        else:
            _rset(host)
        if sender_refused:
            raise smtplib.SMTPSenderRefused(*sender_refused, sender)
        raise smtplib.SMTPRecipientsRefused(refused)
    if code != 354:
        raise smtplib.SMTPDataError(code, reply)
    if any(code in TOO_MANY for code, _ in refused.values()):
        then = b""  # a further transaction comes first
    code, reply = _data(host, data, then)
    if code != 250:
        if code == 421 or not then:
            _end_transaction(host, code)
            raise smtplib.SMTPDataError(code, reply)
        raise DataRefused(code, reply)
    refused.reply = reply
    return refused


def envelope(host: smtplib.SMTP, mail: Prepared) -> bytes:
    """A mail's MAIL, RCPT and DATA commands as one write, for sendmail's `then`.

    ValueError or UnicodeError if they cannot be sent as they are.
    """
    commands = _envelope(host, mail.sender, mail.recipients, mail.data)
    return _group(commands).encode("utf-8" if mail.data.smtputf8 else "ascii")


def pipelines(host: smtplib.SMTP) -> bool:
    """Whether the server (greeted already) takes commands in groups."""
    return bool(host.does_esmtp and host.has_extn("pipelining"))


def _group(commands: list[str]) -> str:
    """MAIL and RCPT commands, then DATA, as one pipelined write."""
    return "".join(f"{line}\r\n" for line in [*commands, "data"])


def _envelope(host: smtplib.SMTP, sender: str, recipients: list[str], data: Rendered) -> list[str]:
    """The MAIL and RCPT commands of a mail, as smtplib's sendmail words them."""
    options = f" size={data.size()}" if host.does_esmtp and host.has_extn("size") else ""
    if data.eight_bit:
        options += " BODY=8BITMIME"  # RFC 6152
    if data.smtputf8:
        options += " SMTPUTF8"  # RFC 6531
    commands = [f"mail FROM:<{sender}>{options}"]
    commands += [f"rcpt TO:<{recipient}>" for recipient in recipients]
    if any("\r" in line or "\n" in line for line in commands):
        raise ValueError("an envelope address holds a line break")  # as smtplib's putcmd
    return commands


def _reply(host: smtplib.SMTP, command: str, pipelined: bool) -> tuple[int, bytes]:
    """The answer to command: sent already when pipelined, else sent now."""
    if not pipelined:
        host.send(f"{command}\r\n")
    return host.getreply()


def _end_transaction(host: smtplib.SMTP, code: int) -> None:
    """Close after a 421, else RSET, as sendmail does after a refused command."""
    if code == 421:
        host.close()
    else:
        _rset(host)


def _rset(host: smtplib.SMTP) -> None:
    with contextlib.suppress(smtplib.SMTPServerDisconnected):
        host.rset()


def _data(host: smtplib.SMTP, data: Rendered, then: bytes = b"") -> tuple[int, bytes]:
    """The rest of smtplib's SMTP.data, once the server has said 354: the pieces, then a dot.

    `then` goes out in the same write as the dot.
    """
    held: list[bytes] = []  # pieces gathered into writes of about WRITE_BYTES
    size = 0
    for piece in data.pieces():
        if not piece:
            continue
        if size >= WRITE_BYTES:
            host.send(b"".join(held))
            held, size = [], 0
        # Base64 lines never start with a dot; find() is far cheaper than the regex.
        dotted = piece.startswith(b".") or piece.find(b"\n.") >= 0
        held.append(LINE_DOT.sub(b"..", piece) if dotted else piece)
        size += len(held[-1])
    # The rest goes with the final dot in one write, as smtplib sends it.
    last = held[-1] if held else b""
    end = b".\r\n" if last.endswith(b"\r\n") else b"\r\n.\r\n"
    host.send(b"".join([*held, end, then]))
    return host.getreply()
