"""pipelining.sendmail held to smtplib's SMTP.sendmail: the same server replies, the same outcome.

Both talk to a scripted SMTP server on loopback that records what it reads. Where the
server does not pipeline, outbox must make exactly smtplib's exchange. Where it does,
the differences pipelining makes are undone one by one in as_smtplib, each checked as
it is undone, and what is left must again be smtplib's exchange.
"""

import contextlib
import smtplib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox.mail.rendered import Prepared, Rendered
from outbox.smtp import pipelining
from outbox.worker import sender

Entry = tuple[str, bytes, int]  # what the server read (a command, or "." for a content), its reply


@dataclass(frozen=True)
class Offer:
    """What the server offers after EHLO; `lax`: it says 354 to DATA with no recipient."""

    esmtp: bool = True
    pipelining: bool = True
    size: bool = True
    lax: bool = False  # RFC 2920 asks for 503 or 554 there, as Postfix answers


PIPELINING = Offer()
LOCKSTEP = Offer(pipelining=False)
HELO = Offer(esmtp=False)


@dataclass(frozen=True)
class Script:
    """The reply codes of one mail transaction: to MAIL, each RCPT, DATA and the final dot."""

    mail: int = 250
    rcpts: tuple[int, ...] = (250,)
    data: int = 354
    dot: int = 250


# Seconds either end waits on the other: a guard against a hang, which a loaded machine's
# stalls must not reach; a passing example never waits on it.
HANG = 60


class ScriptedServer(threading.Thread):
    """One SMTP session on a free loopback port, each transaction answered as its script says.

    As Postfix does, it answers RCPT after a refused MAIL with 503, and DATA with 503 after
    a refused MAIL or 554 with no recipient accepted, unless the script says 421 there (a
    server shutting down says it to anything). After a 421 it answers nothing more: it
    reads what is on its way until the client hangs up.
    """

    def __init__(self, offer: Offer, scripts: list[Script]) -> None:
        super().__init__(daemon=True)
        self.offer, self.scripts = offer, iter(scripts)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(HANG)
        self.port: int = self.listener.getsockname()[1]
        self.read: list[Entry] = []
        self.failure: Exception | None = None

    def run(self) -> None:
        try:
            with self.listener, self.listener.accept()[0] as conn:
                conn.settimeout(HANG)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with conn.makefile("rb") as lines:
                    self._serve(conn, lines)
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_WR)
                    lines.read()  # what was on its way, until the client hangs up
        except Exception as exc:  # the test sees it when the run ends
            self.failure = exc

    def _serve(self, conn: socket.socket, lines: BinaryIO) -> None:
        script, number, taken, accepted, rcpt = Script(), -1, False, 0, 0
        conn.sendall(b"220 localhost scripted ESMTP\r\n")
        while line := lines.readline():
            verb, what = line[:4].decode().lower(), ""
            if verb == "ehlo" and self.offer.esmtp:
                conn.sendall(self._extensions())
                self.read.append((verb, line, 250))
                continue
            code = {"ehlo": 502, "helo": 250, "rset": 250, "noop": 250, "quit": 221}.get(verb, 500)
            if verb == "mail":
                script, number, accepted, rcpt = next(self.scripts), number + 1, 0, 0
                code, what, taken = script.mail, f"mail {number}", script.mail == 250
            elif verb == "rcpt":
                code, what = script.rcpts[rcpt], f"rcpt {rcpt}"
                code = code if taken or code == 421 else 503
                rcpt, accepted = rcpt + 1, accepted + (code in (250, 251))
            elif verb == "data":
                if (taken and accepted) or script.data == 421:
                    code = script.data
                else:
                    code = (354 if self.offer.lax else 554) if taken else 503
                what = f"data {number}"
            elif verb == "rset":
                taken = False
            self.read.append((verb, line, code))
            conn.sendall(f"{code} {code // 100}.0.0 {what}\r\n".encode())
            if code == 354:
                content = _content(lines)
                code = script.dot if accepted or script.dot == 421 else 554
                self.read.append((".", content, code))
                conn.sendall(f"{code} {code // 100}.0.0 dot {number}\r\n".encode())
                taken = False
            if code in (221, 421):
                return

    def _extensions(self) -> bytes:
        offered = ["localhost", "8BITMIME"]
        offered += ["PIPELINING"] if self.offer.pipelining else []
        offered += ["SIZE 10485760"] if self.offer.size else []
        lines = [f"250-{name}" for name in offered[:-1]] + [f"250 {offered[-1]}"]
        return "".join(f"{line}\r\n" for line in lines).encode()


def _content(lines: BinaryIO) -> bytes:
    """A mail's content as it comes, dot-stuffed, up to and with the final dot."""
    read = []
    while (line := lines.readline()) != b".\r\n":
        if not line:
            raise EOFError("the client hung up in the middle of a content")
        read.append(line)
    return b"".join([*read, line])


class Client(smtplib.SMTP):
    """smtplib's client, keeping each write it makes."""

    def __init__(self, port: int) -> None:
        self.writes: list[bytes] = []
        super().__init__("127.0.0.1", port, local_hostname="localhost", timeout=HANG)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms waits (Nagle)
        return sock

    def send(self, s: bytes | str) -> None:
        super().send(s)
        self.writes.append(s.encode(self.command_encoding) if isinstance(s, str) else s)


@dataclass
class Run:
    """What came of sending mails over one connection."""

    outcomes: list[object]  # each mail's refused recipients returned, or what was raised
    read: list[list[Entry]]  # what the server read before the first MAIL, then from each MAIL on
    after: object  # the reply to a NOOP after the mails, or "closed"
    writes: list[bytes] = field(compare=False)


def caught(exc: Exception) -> tuple[object, ...]:
    """What matters of an exception: its class and what it carries."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return (type(exc), exc.recipients)
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return (type(exc), exc.smtp_code, exc.smtp_error, exc.sender)
    if isinstance(exc, smtplib.SMTPResponseException):
        return (type(exc), exc.smtp_code, exc.smtp_error)
    return (type(exc), *exc.args)


def by_smtplib(host: Client, mails: list[Prepared]) -> list[object]:
    outcomes: list[object] = []
    for mail in mails:
        if host.sock is None:
            break
        try:
            data = b"".join(mail.data.pieces())
            outcomes.append(host.sendmail(mail.sender, mail.recipients, data))
        except Exception as exc:
            outcomes.append(caught(exc))
    return outcomes


@dataclass
class Ready:
    """A mail written already, the same for every server."""

    prepared: Prepared
    returns = None  # no VERP

    def for_server(self, offered: object) -> Prepared:
        return self.prepared


def by_outbox(host: Client, mails: list[Prepared]) -> list[object]:
    """As sender.deliver sends: the next mail's commands with this one's end, if they can go."""
    outcomes: list[object] = []
    written = False
    for mail, following in zip(mails, [*mails[1:], None], strict=True):
        if host.sock is None:
            break
        host.ehlo_or_helo_if_needed()
        then = sender._ahead(host, Ready(following) if following else None, sender.features(host))
        try:
            refused = pipelining.sendmail(
                host, mail.sender, mail.recipients, mail.data, written=written, then=then
            )
            outcomes.append(refused)
            # Recipients past a limit go in a further transaction before the next mail.
            written = bool(then) and not any(c in pipelining.TOO_MANY for c, _ in refused.values())
        except pipelining.DataRefused as exc:
            outcomes.append(caught(exc))
            written = True
        except Exception as exc:
            outcomes.append(caught(exc))
            written = False
    return outcomes


def exchange(
    offer: Offer,
    scripts: list[Script],
    mails: list[Prepared],
    send: Callable[[Client, list[Prepared]], list[object]],
) -> Run:
    server = ScriptedServer(offer, scripts)
    server.start()
    host = Client(server.port)
    try:
        outcomes = send(host, mails)
        after: object = "closed"
        if host.sock is not None:
            try:
                after = host.noop()[0]
            except smtplib.SMTPServerDisconnected:
                after = "hung up"
    finally:
        host.close()
    server.join(10)
    assert not server.is_alive() and server.failure is None, server.failure
    if server.read and server.read[-1][0] == "noop":
        server.read.pop()  # its reply is `after`
    read: list[list[Entry]] = [[]]
    for entry in server.read:
        if entry[0] == "mail":
            read.append([])
        read[-1].append(entry)
    return Run(outcomes, read, after, host.writes)


RSET: Entry = ("rset", b"rset\r\n", 250)


def as_smtplib(ours: Run, offer: Offer, mails: int) -> tuple[Run, bool]:
    """ours with what pipelining changes undone, and whether ours ended early; each checked.

    Where the server pipelines, outbox writes a mail's MAIL, RCPT and DATA at once, and
    the next mail's with this one's final dot. So:
    1. In a transaction refused whole (MAIL refused, or no RCPT accepted) the server also
       reads the RCPTs and DATA smtplib never sends; it refuses them (503, 554), or takes
       an empty content and then refuses it (lax), or says 421. The exception is smtplib's.
    2. If it says 421 to one of those, the connection is closed there; smtplib sends RSET
       instead and goes on, so ours is a beginning of smtplib's run.
    3. A refusal at the final dot with the next mail's commands written after it raises
       DataRefused, an SMTPDataError, and sends no RSET: the server reads those next.
    """
    if not (offer.esmtp and offer.pipelining):
        return ours, False
    outcomes, read = list(ours.outcomes), [ours.read[0]]
    for n, sent in enumerate(ours.read[1:]):
        kept, extra = sent[:1], []
        refused, accepted = sent[0][2] != 250, False
        for entry in sent[1:]:
            verb, content, code = entry
            whole = refused or (verb in ("data", ".") and not accepted)
            (extra if verb in ("rcpt", "data", ".") and whole else kept).append(entry)
            accepted = accepted or (verb == "rcpt" and code in (250, 251))
        for verb, content, code in extra:
            lax = offer.lax and not refused and (verb, code) == ("data", 354)
            assert code in (421, 503, 554) or lax, (verb, code)
            assert verb != "." or content == b".\r\n"
        read.append(kept)
        outcome = outcomes[n]
        if isinstance(outcome, tuple) and outcome[0] is pipelining.DataRefused:
            assert n < mails - 1 and outcome[1] != 421
            outcomes[n] = (smtplib.SMTPDataError, *outcome[1:])
            kept.append(RSET)
        if any(code == 421 for _, _, code in extra):
            assert ours.after == "closed" and len(ours.read) == n + 2 and len(outcomes) == n + 1
            kept.append(RSET)
            return Run(outcomes, read, ours.after, ours.writes), True
    return Run(outcomes, read, ours.after, ours.writes), False


def check(offer: Offer, mails: list[tuple[Script, Prepared]]) -> tuple[Run, Run]:
    """Send mails with smtplib and with outbox; assert that they did the same."""
    scripts, prepared = [script for script, _ in mails], [mail for _, mail in mails]
    theirs = exchange(offer, scripts, prepared, by_smtplib)
    ours = exchange(offer, scripts, prepared, by_outbox)
    expected, ended = as_smtplib(ours, offer, len(mails))
    if ended:  # smtplib went on after the point where ours was closed
        n = len(expected.outcomes)
        theirs = Run(theirs.outcomes[:n], theirs.read[: n + 1], "closed", theirs.writes)
    assert expected == theirs, f"{offer}, sending {mails}"
    return ours, theirs


def recipients(count: int) -> list[str]:
    # Addr-specs, as mime writes the envelope: one with a quoted local part.
    return [f"r{n}@example.com" if n % 2 else f'"r {n}"@example.com' for n in range(count)]


def mail(script: Script, text: bytes = b"Subject: hi\r\n\r\nHi\r\n") -> tuple[Script, Prepared]:
    listed = recipients(len(script.rcpts))
    return script, Prepared("outbox@example.com", listed, listed, Rendered([text], []))


def verbs(run: Run) -> list[tuple[str, int]]:
    """What the server read, in order, each with its reply code; "." is a mail's content."""
    return [(verb, code) for sent in run.read for verb, _, code in sent]


def test_where_the_server_pipelines_a_mail_takes_one_write() -> None:
    # What the drain's speed rests on; the server cannot tell. smtplib writes each
    # command and waits for its reply; outbox writes a mail's commands at once, and the
    # next mail's with this one's content.
    mails = [mail(Script()) for _ in range(3)]
    ours, theirs = check(PIPELINING, mails)
    w = theirs.writes  # EHLO; MAIL, RCPT, DATA and the content of each mail; NOOP
    assert len(w) == 1 + 3 * 4 + 1
    joined = [b"".join(w[1:4]), b"".join(w[4:8]), b"".join(w[8:12])]
    assert ours.writes == [w[0], *joined, w[12], w[13]]
    ours, theirs = check(LOCKSTEP, mails)
    assert ours.writes == theirs.writes


def test_a_refusal_at_the_dot_with_the_next_mail_written_sends_no_rset() -> None:
    ours, theirs = check(PIPELINING, [mail(Script(dot=554)), mail(Script())])
    assert ours.outcomes == [(pipelining.DataRefused, 554, b"5.0.0 dot 0"), {}]
    assert theirs.outcomes == [(smtplib.SMTPDataError, 554, b"5.0.0 dot 0"), {}]
    sent = [("mail", 250), ("rcpt", 250), ("data", 354)]
    assert verbs(ours) == [("ehlo", 250), *sent, (".", 554), *sent, (".", 250)]
    assert verbs(theirs) == [("ehlo", 250), *sent, (".", 554), ("rset", 250), *sent, (".", 250)]


def test_a_transaction_refused_whole_has_had_all_its_commands_when_pipelined() -> None:
    ours, theirs = check(PIPELINING, [mail(Script(mail=550, rcpts=(250, 250)))])
    refused = [("rcpt", 503), ("rcpt", 503), ("data", 503)]
    assert verbs(ours) == [("ehlo", 250), ("mail", 550), *refused, ("rset", 250)]
    assert verbs(theirs) == [("ehlo", 250), ("mail", 550), ("rset", 250)]
    # A server that takes DATA with no recipient gets an empty content.
    ours, theirs = check(Offer(lax=True), [mail(Script(rcpts=(550,)))])
    assert ours.read[1][3] == (".", b".\r\n", 554)
    assert verbs(ours) == [
        ("ehlo", 250), ("mail", 250), ("rcpt", 550), ("data", 354), (".", 554), ("rset", 250),
    ]  # fmt: skip
    assert verbs(theirs) == [("ehlo", 250), ("mail", 250), ("rcpt", 550), ("rset", 250)]


DOTTED = b"Subject: dots\r\n\r\n.\r\n..\r\n.hi\r\nend\r\n."  # ends in a dot, not in CRLF
UNENDED = b"Subject: no end\r\n\r\nthe last line without its CRLF"
ATTACHED = Rendered([b"Subject: a file\r\n\r\n", b".\r\nthe end\r\n"], [b"\x00.\xff" * 50])

CASES = {
    "all accepted": (mail(Script(rcpts=(250, 251, 250))), None),
    "one of three recipients refused 550": (mail(Script(rcpts=(250, 550, 250))), None),
    "one of three recipients refused 450": (mail(Script(rcpts=(450, 250, 250))), None),
    "all recipients refused, 4xx and 5xx": (
        mail(Script(rcpts=(450, 550, 452))),
        smtplib.SMTPRecipientsRefused,
    ),
    "all recipients refused 5xx": (mail(Script(rcpts=(550, 553))), smtplib.SMTPRecipientsRefused),
    "452 after three recipients": (mail(Script(rcpts=(250, 250, 250, 452, 452))), None),
    "no recipients": (mail(Script(rcpts=())), smtplib.SMTPRecipientsRefused),
    "MAIL refused 553": (mail(Script(mail=553, rcpts=(250, 250))), smtplib.SMTPSenderRefused),
    "MAIL refused 451": (mail(Script(mail=451)), smtplib.SMTPSenderRefused),
    "421 at MAIL": (mail(Script(mail=421)), smtplib.SMTPSenderRefused),
    "421 at the second RCPT": (mail(Script(rcpts=(250, 421, 250))), smtplib.SMTPRecipientsRefused),
    "421 at DATA": (mail(Script(data=421)), smtplib.SMTPDataError),
    "421 at the final dot": (mail(Script(dot=421)), smtplib.SMTPDataError),
    "DATA refused 554": (mail(Script(data=554)), smtplib.SMTPDataError),
    "final dot refused 552": (mail(Script(dot=552)), smtplib.SMTPDataError),
    "final dot refused 451": (mail(Script(dot=451)), smtplib.SMTPDataError),
    # Replies to commands only a pipelining client sends: the server is shutting down.
    "MAIL refused, then 421 to a RCPT": (
        mail(Script(mail=550, rcpts=(250, 421))),
        smtplib.SMTPSenderRefused,
    ),
    "all recipients refused, then 421 to DATA": (
        mail(Script(rcpts=(550,), data=421)),
        smtplib.SMTPRecipientsRefused,
    ),
    "lines that start with a dot": (mail(Script(), DOTTED), None),
    "a content not ending in CRLF": (mail(Script(), UNENDED), None),
    "an attachment": (
        (Script(), Prepared("outbox@example.com", recipients(1), recipients(1), ATTACHED)),
        None,
    ),
}
OFFERS = {
    "pipelining": PIPELINING,
    "lax pipelining": Offer(lax=True),
    "pipelining without SIZE": Offer(size=False),
    "in lockstep": LOCKSTEP,
    "HELO": HELO,
}


@pytest.mark.parametrize("offer", OFFERS.values(), ids=OFFERS.keys())
@pytest.mark.parametrize(("first", "raised"), CASES.values(), ids=CASES.keys())
def test_sendmail_does_what_smtplib_does(
    offer: Offer, first: tuple[Script, Prepared], raised: type[Exception] | None
) -> None:
    _, theirs = check(offer, [first, mail(Script())])
    outcome = theirs.outcomes[0]
    assert (outcome[0] if isinstance(outcome, tuple) else None) is raised


CODES = [250, 251, 421, 450, 451, 452, 550, 551, 552, 553, 554]


def replies(usual: int) -> st.SearchStrategy[int]:
    """A reply code, the usual one about half the time."""
    return st.one_of(st.just(usual), st.sampled_from(CODES))


TEXT = st.lists(
    st.sampled_from([b"a", b"From x", b" ", b".", b"..", b"\r\n", b"\n", b"\r", b".\r\n"]),
    max_size=12,
).map(b"".join)
CONTENTS = st.one_of(
    st.builds(lambda text: Rendered([text], []), TEXT),
    # Each piece begins a line (mime.Rendered.pieces): the text before a body ends one.
    st.builds(
        lambda head, body, tail: Rendered([head + b"\r\n", tail], [body]),
        TEXT,
        st.binary(max_size=120),
        TEXT,
    ),
)
SENDERS = st.sampled_from(["outbox@example.com", '"out box"@example.com', ""])
MAILS = st.builds(
    lambda script, sender, data: (
        script,
        Prepared(sender, recipients(len(script.rcpts)), recipients(len(script.rcpts)), data),
    ),
    st.builds(
        Script,
        mail=replies(250),
        rcpts=st.lists(replies(250), min_size=0, max_size=4).map(tuple),
        data=replies(354),
        dot=replies(250),
    ),
    SENDERS,
    CONTENTS,
)


@settings(max_examples=300, deadline=None)
@given(
    offer=st.builds(Offer, st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    mails=st.lists(MAILS, min_size=1, max_size=3),
)
def test_sendmail_does_what_smtplib_does_for_any_replies(
    offer: Offer, mails: list[tuple[Script, Prepared]]
) -> None:
    check(offer, mails)
