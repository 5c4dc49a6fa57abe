"""What a page says after an action: one notice, put in place for htmx (HX-Trigger) or flashed."""

import json

from flask import Response, flash, make_response, request
from flask.typing import ResponseReturnValue

# The event static/outbox.js listens for; its detail is {"text": ..., "refused": ...}.
EVENT = "outbox:notice"


def is_htmx() -> bool:
    """An htmx request (not a boosted page load): its answer is swapped in place."""
    return bool(request.headers.get("HX-Request")) and not request.headers.get("HX-Boosted")


def trigger(text: str, *, refused: bool = False) -> str:
    """The HX-Trigger header's value for a notice (ASCII: headers are Latin-1)."""
    return json.dumps({EVENT: {"text": text, "refused": refused}})


def said(answer: ResponseReturnValue, text: str, *, refused: bool = False) -> Response:
    """The answer with its notice: in a header htmx turns into an event, else flashed for the
    page the browser is sent to next."""
    response: Response = make_response(answer)
    if is_htmx():
        response.headers["HX-Trigger"] = trigger(text, refused=refused)
    else:
        flash(text, "refused" if refused else "message")
    return response


def refused(text: str, status: int = 200) -> Response:
    """An htmx answer that changes nothing on the page and says why."""
    return Response(status=status, headers={"HX-Trigger": trigger(text, refused=True),
                                            "HX-Reswap": "none"})  # fmt: skip


def plural(count: int, word: str) -> str:
    """ "1 message", "3 messages"."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"
