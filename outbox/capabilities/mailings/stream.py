"""Reading a mailing request as a stream: its fields whole, its recipients one at a time.

ijson parses the body as it arrives, so a request of 100,000 recipients is never held
whole in memory: each recipient is handed on as soon as it is read, and the caller
stores them a chunk at a time. Recipients read before fields that come after them are
kept in a Spool (a temporary file past SPOOL_MEMORY) until the fields are known.
"""

import marshal
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import ijson

from outbox.core import untrusted_json

RECIPIENTS = "recipients"
SPOOL_MEMORY = 256 * 1024  # bytes of recipients a Spool keeps in memory before a file


class Malformed(Exception):
    """The body is not a JSON object of the shape a mailing request takes."""


class _Reader:
    """A body ijson may probe with read(0), which Werkzeug's LimitedStream takes for a
    client that went away."""

    def __init__(self, body: IO[bytes]) -> None:
        self.body = body

    def read(self, size: int = -1) -> bytes:
        return self.body.read(size) if size else b""


def _built(first: tuple[str, Any], events: Iterator[tuple[str, Any]]) -> Any:
    """The value that starts with the event first, built from the events after it."""
    builder = ijson.ObjectBuilder()
    event, value = first
    builder.event(event, value)
    depth = 1 if event in ("start_map", "start_array") else 0
    while depth:
        event, value = next(events)
        builder.event(event, value)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
        if depth > untrusted_json.MAX_DEPTH:  # built without recursion, but read with it
            raise Malformed(f"a value of the body {untrusted_json.TOO_DEEP}")
    return builder.value


def read(body: IO[bytes]) -> Iterator[tuple[str, Any]]:
    """("field", (name, value)) for each top-level field but recipients, ("recipient", value)
    for each item of recipients, and ("end", None) after the list; in the body's order.

    Malformed for a body that is not JSON or not an object, or whose recipients is not a
    list.
    """
    events = ijson.basic_parse(_Reader(body), use_float=True)
    try:
        if next(events, ("", None))[0] != "start_map":
            raise Malformed("the body must be a JSON object")
        for event, key in events:
            if event == "end_map":
                break
            first = next(events)
            if key != RECIPIENTS:
                yield "field", (key, _built(first, events))
                continue
            if first[0] != "start_array":
                raise Malformed("recipients must be a list of {email, name?, fields?} objects")
            for item in events:
                if item[0] == "end_array":
                    break
                yield "recipient", _built(item, events)
            yield "end", None
        if next(events, None) is not None:
            raise Malformed("the body holds more than one JSON value")
    except ijson.JSONError as exc:
        said = (str(exc).splitlines() or [""])[0]  # yajl's next lines point at the fault
        raise Malformed(f"the body is not valid JSON: {said}") from None
    except StopIteration:
        raise Malformed("the body ends before its JSON does") from None


class Spool:
    """Recipients kept in the order read, in memory, then in a temporary file.

    marshal, not JSON: it writes a parsed recipient (dicts, lists, str, numbers) several
    times as fast, and the file is read back only by the process that wrote it.
    """

    def __init__(self) -> None:
        self.file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def add(self, item: Any) -> None:
        """Keep one recipient as read."""
        data = marshal.dumps(item)
        self.file.write(len(data).to_bytes(4, "big") + data)

    def __iter__(self) -> Iterator[Any]:
        self.file.seek(0)
        while size := self.file.read(4):
            yield marshal.loads(self.file.read(int.from_bytes(size, "big")))
