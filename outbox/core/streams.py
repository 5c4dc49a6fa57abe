"""Message streams: transactional mail (one person's receipt or password reset) and
broadcast mail (a mailing, a newsletter), claimed, suppressed and routed each its own way."""

from enum import StrEnum


class Stream(StrEnum):
    TRANSACTIONAL = "transactional"
    BROADCAST = "broadcast"


# The stream of a message that names none: the API's, the compose page's and SMTP's.
DEFAULT = Stream.TRANSACTIONAL
# The order claims take the streams in: a password reset goes before the newsletter
# that is queued ahead of it.
CLAIM_ORDER: tuple[Stream, ...] = (Stream.TRANSACTIONAL, Stream.BROADCAST)
STREAM_CHARS = 16  # the width of messages.stream
NAMES = ", ".join(stream.value for stream in Stream)


def parse(value: object) -> Stream:
    """A stream from its name (any case, spaces around it); ValueError naming the streams."""
    if isinstance(value, Stream):
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be a stream name: {NAMES}")
    try:
        return Stream(value.strip().lower())
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not a stream; the streams are {NAMES}") from None
