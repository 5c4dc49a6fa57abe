"""What differs by kind of message (core.kinds): how a claimed row becomes a mail, and how
staff's Send again copies a sent one. Whoever owns a kind registers both at start
(outbox.app); the queue and the worker look them up by the row's kind, never by its columns.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

from outbox.core.kinds import Kinded, MessageKind, kind_of
from outbox.mail.rendered import Sendable
from outbox.models import Message

KEY = "outbox.queue.kinds"  # the app's {MessageKind: Handling}, in app.extensions

# A claimed row (queue.Claim.mail) made ready for SMTP; mime.BuildError or
# queue.Damaged if it cannot be.
Build = Callable[[Any], Sendable]
# A sent message copied as a new queued one: (the sent one, source, max_attempts).
SendAgain = Callable[[Message, str, int], Message]


@dataclass(frozen=True)
class Handling:
    """What one kind of message does where the kinds differ."""

    build: Build
    send_again: SendAgain


def on_kind(app: Flask, kind: MessageKind, *, build: Build, send_again: SendAgain) -> None:
    """Register how messages of a kind are built and sent again; once per kind."""
    registered: dict[MessageKind, Handling] = app.extensions.setdefault(KEY, {})
    if kind in registered:
        raise ValueError(f"{kind} messages are handled already")
    registered[kind] = Handling(build, send_again)


def handling(row: Kinded) -> Handling:
    """How the row's kind of message is handled; LookupError if nothing registered it."""
    kind = kind_of(row)
    found: Handling | None = current_app.extensions.get(KEY, {}).get(kind)
    if found is None:
        raise LookupError(f"nothing handles {kind} messages: outbox.app registers each at start")
    return found


def build(row: Any) -> Sendable:
    """A claimed row made ready for SMTP by its kind's builder."""
    return handling(row).build(row)
