"""The kinds of message and how a row tells which it is: written from its columns, a
mailing's recipient rendered from its mailing, or a submitted mail sent as it came."""

from enum import StrEnum
from typing import Protocol


class MessageKind(StrEnum):
    """How a message's mail is made (and copied by Send again).

    Not addresses.Kind, which is a recipient's field (to, cc, bcc).
    """

    PLAIN = "plain"  # from its own columns and attachments (the API, the compose form)
    MAILING = "mailing"  # a mailing's recipient: rendered from the mailing at send time
    RAW = "raw"  # handed over by SMTP: its stored bytes, as they came


class Kinded(Protocol):
    """What a row's kind is read from: a Message, a claimed row, anything with the columns."""

    @property
    def raw_size(self) -> int | None: ...

    @property
    def mailing_id(self) -> int | None: ...


def kind_of(row: Kinded) -> MessageKind:
    """The kind of a message row: raw if it holds stored bytes, mailing if it has a mailing."""
    if row.raw_size is not None:
        return MessageKind.RAW
    if row.mailing_id:
        return MessageKind.MAILING
    return MessageKind.PLAIN
