"""The outbox list's bulk actions: resend or cancel the rows chosen, each as its status allows."""

from typing import Any

from flask import Blueprint, abort, current_app, redirect, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox import queue
from outbox.auth import audit
from outbox.core.status import Status, sources
from outbox.models import ID_RANGE
from outbox.ops import reports
from outbox.web.confirm import confirm_page, confirmed
from outbox.web.forms import ActionForm
from outbox.web.messages import fragment, listing, wants_fragment
from outbox.web.notice import plural, said
from outbox.web.roles import requires

bp = Blueprint("bulk", __name__, url_prefix="/messages")
bp.before_request(login_required(lambda: None))

CHOSEN_MAX = 500  # ids in one request: ten pages of the list
# Each move: the statuses it takes a message from, and how the page words it.
MOVES = {
    "resend": ((Status.FAILED, Status.CANCELLED), "Resend", "queued again", "failed or cancelled"),
    "cancel": (sources(Status.CANCELLED), "Cancel", "cancelled", "queued or deferred"),
}


def _chosen() -> list[int]:
    """The message ids ticked in the list; 400 if any is not an id."""
    raw = request.form.getlist("ids")
    if len(raw) > CHOSEN_MAX:
        abort(400, description=f"choose at most {CHOSEN_MAX} messages at a time")
    try:
        ids = sorted({int(value) for value in raw})
    except ValueError:
        abort(400, description="ids must be message ids")
    if any(pk not in ID_RANGE for pk in ids):
        abort(400, description="ids must be message ids")
    return ids


@bp.post("/bulk")
@requires("bulk")
def act() -> ResponseReturnValue:
    """Resend or cancel the chosen messages; say how many moved and how many were skipped."""
    if not ActionForm().validate_on_submit():
        abort(400)
    move = request.form.get("move", "")
    if move not in MOVES:
        abort(400, description="move must be resend or cancel")
    statuses, verb, done_as, allowed = MOVES[move]
    ids = _chosen()
    kept: dict[str, Any] = {k: v for k in ("status", "q", "before") if (v := request.args.get(k))}
    here = url_for("messages.index", **kept)
    if not ids:
        words, refused = "Nothing was chosen: tick the messages first.", True
    elif not confirmed():
        movable = reports.in_statuses(ids, statuses)
        detail = (f"{movable} of the {len(ids)} chosen are {allowed} and will be {done_as}; "
                  f"the others are left as they are.")  # fmt: skip
        question = f"{verb} {movable} message{'s' if movable != 1 else ''}?"
        return confirm_page(question, detail, url_for("bulk.act", **kept), here,
                            {"ids": ids, "move": move})  # fmt: skip
    else:
        movable = reports.in_statuses(ids, statuses)
        if move == "resend":
            moved = queue.resend_many(ids, current_app.config["MAX_ATTEMPTS"])
        else:
            moved = queue.cancel_many(ids)
        audit.record(f"bulk_{move}", detail={"ids": ids, "moved": moved.done})
        words, refused = moved_words(moved.done, len(ids), movable, done_as, allowed), False
    if wants_fragment():
        context = listing(request.args)
        return said(fragment("messages/_listing.html", 200, **context), words, refused=refused)
    return said(redirect(here), words, refused=refused)


def moved_words(done: int, chosen: int, movable: int, done_as: str, allowed: str) -> str:
    """How many of the chosen moved, and why the others did not."""
    words = f"{plural(done, 'message')} {done_as}."
    reasons = []
    if chosen > movable:
        reasons.append((chosen - movable, f"not {allowed}"))
    if movable > done:  # allowed when asked: no one left to send to, or moved meanwhile
        reasons.append((movable - done, "every recipient on the suppression list, or moved "
                                        "meanwhile"))  # fmt: skip
    if not reasons:
        return words
    left = chosen - done
    why = reasons[0][1] if len(reasons) == 1 else ", ".join(f"{n} {r}" for n, r in reasons)
    return f"{words} {left} left as {'it was' if left == 1 else 'they were'}: {why}."
