"""The capture transport: a session that keeps each mail in the store instead of sending it,
and the allowlist's split of a mail between SMTP and the store."""

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from flask import current_app

from outbox.capabilities.capture import store
from outbox.capabilities.capture.settings import ALLOWLIST, CAPTURE, read_allowed
from outbox.core.deliveries import ACCEPTED, Reply, overall
from outbox.core.status import Outcome
from outbox.mail.mime import BuildError
from outbox.mail.rendered import Features, Prepared, Sendable
from outbox.smtp.replies import Result

# The mail is written as for a server offering 8BITMIME and SMTPUTF8, as Postfix and most do.
WIRE = Features(eight_bit=True, smtputf8=True)
SAID = "captured by outbox (OUTBOX_DELIVERY): not sent"
log = logging.getLogger("outbox.worker")
# Copies held for the next settle, in bytes, past which they are written at once: mails
# with large attachments are not held a hundred at a time (OUTBOX_RECORD_EVERY).
HELD_BYTES = 8 * 1024 * 1024


def mode(config: Mapping[str, Any] | None = None) -> str:
    """smtp, capture or allowlist: what the workers do with mail (OUTBOX_DELIVERY)."""
    return str((config or current_app.config)["DELIVERY"])


def allowed(config: Mapping[str, Any] | None = None) -> frozenset[str]:
    """The addresses and @domains the allowlist sends to."""
    found = (config or current_app.config)["DELIVERY_ALLOW"]
    return read_allowed(found) if isinstance(found, str) else frozenset(found)


def warn_mode(config: Mapping[str, Any]) -> None:
    """Log at a worker's start that mail is kept, not sent, when it is."""
    chosen = mode(config)
    if chosen == CAPTURE:
        log.warning("OUTBOX_DELIVERY=capture: no mail leaves; every message is kept on the "
                    "Captured page as sent")  # fmt: skip
    elif chosen == ALLOWLIST:
        log.warning("OUTBOX_DELIVERY=allowlist: mail goes out only to %s; mail to anyone else "
                    "is kept on the Captured page", ", ".join(sorted(allowed(config))))  # fmt: skip


def on_list(address: str, allow: frozenset[str]) -> bool:
    """Whether a stored recipient address is on the allowlist, itself or by its domain."""
    address = address.lower()
    return address in allow or "@" + address.rpartition("@")[2] in allow


class Session(Protocol):
    """What the worker sends on: an SMTP session, or one of these."""

    route: Any
    captures: bool  # no server is spoken to: the route's health is not noted

    def send(self, pk: int, mail: Sendable, deadline: float | None = None,
             following: Sendable | None = None) -> Result: ...  # fmt: skip

    def settle(self) -> None:
        """Write what the session kept of the mails sent so far, before their outcomes."""

    def drop(self) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass
class Only:
    """A mail restricted to some of its pending recipients (a Sendable)."""

    mail: Sendable
    chosen: frozenset[str]  # stored addresses
    pending: list[str] = dataclasses.field(init=False)
    returns: dict[str, str] | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.pending = [a for a in self.mail.pending if a in self.chosen]
        found = self.mail.returns
        self.returns = None if found is None else {a: p for a, p in found.items()
                                                   if a in self.chosen}  # fmt: skip

    def for_server(self, features: Features) -> Prepared:
        whole = self.mail.for_server(features)
        kept = [(wire, stored) for wire, stored in zip(whole.recipients, whole.stored, strict=True)
                if stored in self.chosen]  # fmt: skip
        return dataclasses.replace(
            whole, recipients=[w for w, _ in kept], stored=[s for _, s in kept],
            unsendable={a: why for a, why in whole.unsendable.items() if a in self.chosen},
        )  # fmt: skip


class CaptureSession:
    """A session of one route's that keeps every mail in the capture store, each recipient
    accepted: the whole pipeline runs, only the network is left out."""

    captures = True  # the route is never spoken to: its health stays as it was

    def __init__(self, route: Any) -> None:
        self.route = route
        self.kept: list[store.Kept] = []  # not written yet: settle() writes them

    def send(self, pk: int, mail: Sendable, deadline: float | None = None,
             following: Sendable | None = None) -> Result:  # fmt: skip
        """Keep the mail as it would go to a server; what came of each recipient."""
        try:
            prepared = mail.for_server(WIRE)
        except BuildError as exc:
            return Result(Outcome.FAILED, None, str(exc))
        replies = {address: Reply(Outcome.FAILED, None, why)
                   for address, why in prepared.unsendable.items()}  # fmt: skip
        if prepared.recipients:
            raw = b"".join(prepared.data.pieces())
            self.kept.append(store.Kept(pk, prepared.sender, list(prepared.recipients), raw))
            if sum(len(k.raw) for k in self.kept) > HELD_BYTES:
                self.settle()  # early is safe: a copy may precede its outcome, never follow
            replies.update(dict.fromkeys(prepared.stored, ACCEPTED))
        return _result(replies, SAID if prepared.recipients else None)

    def settle(self) -> None:
        """Write the mails kept since the last settle, in one statement and transaction.

        The worker settles before it records outcomes: a worker that dies before then
        has recorded none of these, and sends (and keeps) them again, as a server's
        250 lost with the worker would have them sent again.
        """
        if self.kept:
            store.keep(self.kept)
            self.kept = []

    def drop(self) -> None:
        """Nothing to drop: no connection."""

    def close(self) -> None:
        """Nothing to close: no connection."""


class Split:
    """The allowlist's session: recipients on the list over SMTP, the rest kept by capture."""

    captures = False  # the route is spoken to for the recipients on the list

    def __init__(self, smtp: Session, route: Any, allow: frozenset[str]) -> None:
        self.smtp, self.route, self.allow = smtp, route, allow
        self.capture = CaptureSession(route)

    def send(self, pk: int, mail: Sendable, deadline: float | None = None,
             following: Sendable | None = None) -> Result:  # fmt: skip
        """Send the listed recipients' mail, then keep the rest's; what came of each.

        The SMTP part goes first: a fault there (the server unreachable) defers the whole
        message with nothing kept, so its retry keeps the rest once. The next mail's
        commands are not written ahead: it is split anew.
        """
        listed = frozenset(a for a in mail.pending if on_list(a, self.allow))
        if not listed:
            return self.capture.send(pk, mail)
        sent = self.smtp.send(pk, Only(mail, listed), deadline)
        rest = frozenset(mail.pending) - listed
        if not rest or sent.fault:
            return sent
        kept = self.capture.send(pk, Only(mail, rest))
        replies = {**sent.recipients, **kept.recipients}
        merged = _result(replies, sent.reply)
        return dataclasses.replace(merged, code=sent.code, error=sent.error)

    def settle(self) -> None:
        self.capture.settle()

    def drop(self) -> None:
        self.smtp.drop()

    def close(self) -> None:
        self.smtp.close()


def session(route: Any, smtp: Any, config: Mapping[str, Any] | None = None) -> Any:
    """The session a worker sends on for route in this mode: smtp(route) itself in smtp mode."""
    chosen = mode(config)
    if chosen == CAPTURE:
        return CaptureSession(route)
    if chosen == ALLOWLIST:
        return Split(smtp(route), route, allowed(config))
    return smtp(route)


def _result(replies: dict[str, Reply], said: str | None) -> Result:
    """The attempt as a whole from its recipients' replies (deliveries.overall)."""
    return Result(overall(replies), None, None, replies, reply=said)
