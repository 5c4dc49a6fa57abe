"""The step a button that mails customers (or stops their mail) takes first: it asks.

With JavaScript htmx asks in a dialog (hx-confirm) and sends confirmed=yes after a yes
(hx-vals); without it the view answers a confirmation page whose button sends the same.
A request without the field changes nothing, so a stray POST mails no one.
"""

from typing import Any, NamedTuple

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue

from outbox.core.status import Status, sources
from outbox.models import Message


class Ask(NamedTuple):
    """What a button asks first."""

    question: str  # formatted with the message as m
    detail: str
    statuses: tuple[str, ...]  # those the move is allowed from: otherwise nothing is asked


CANCEL = Ask("Cancel message #{m.id}?", "It will not be sent; Resend can queue it again.",
             tuple(s.value for s in sources(Status.CANCELLED)))  # fmt: skip
SEND_AGAIN = Ask("Send message #{m.id} again?",
                 "A new copy goes to every recipient, including those who have it already.",
                 (Status.SENT.value,))  # fmt: skip


def confirmed() -> bool:
    """Whether the person said yes: htmx's hx-confirm sends the field after its dialog,
    the confirmation page (without JavaScript) sends it from its own button."""
    return request.form.get("confirmed") == "yes"


def confirm_page(question: str, detail: str, action: str, back: str,
                 fields: dict[str, Any] | None = None) -> ResponseReturnValue:  # fmt: skip
    """The step a button that mails customers (or stops mail) takes without JavaScript."""
    return render_template("messages/confirm.html", question=question, detail=detail,
                           action=action, back=back, fields=fields or {})  # fmt: skip


def ask_first(message: Message, ask: Ask | None) -> ResponseReturnValue | None:
    """The confirmation page, if the move needs one, is allowed now and was not confirmed."""
    if ask is None or confirmed() or message.status not in ask.statuses:
        return None  # a move not allowed goes on, to be refused (409)
    back = url_for("messages.show", message_pk=message.id)
    return confirm_page(ask.question.format(m=message), ask.detail, request.path, back)
