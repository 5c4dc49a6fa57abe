"""The outbox list's bulk actions: resend or cancel the rows chosen, each as its status allows,
or every message a filter finds, as a job a worker runs (capabilities.bulk_jobs)."""

from typing import Any

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from outbox import queue
from outbox.auth import audit
from outbox.capabilities import bulk_jobs
from outbox.core.filters import Filter, FilterError
from outbox.core.status import Status, sources
from outbox.models import ID_RANGE
from outbox.ops import reports
from outbox.web.confirm import confirm_page, confirmed
from outbox.web.forms import ActionForm
from outbox.web.messages import fragment, listing, read_filter, wants_fragment
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


def _job_filter() -> tuple[str, str, Any]:
    """The move, tab and filter a job is asked for (query string); 400 naming a bad one."""
    move = request.values.get("move", "")
    if move not in bulk_jobs.MOVES:
        abort(400, description="move must be resend or cancel")
    try:
        status, found = read_filter(request.args)
    except FilterError as exc:
        abort(400, description=str(exc))
    if not found.active:
        abort(400, description="a job acts on a filter: filter the list first")
    return move, status, found


@bp.route("/jobs/new", methods=["GET", "POST"])
@requires("bulk")
def new_job() -> ResponseReturnValue:
    """Ask first (how many it would move), then start the job and show its page."""
    move, status, found = _job_filter()
    back = url_for("messages.index", status=status, q=found.spelled() or None)
    here = url_for("bulk.new_job", move=move, status=status, q=found.spelled() or None)
    statuses, verb, done_as, allowed = MOVES[move]
    if request.method == "GET" or not confirmed():
        counted = reports.movable_count(found, statuses, reports.highest_id(),
                                        cap=reports.BULK_COUNT_CAP)  # fmt: skip
        detail = (f"{counted} message{'s' if counted.value != 1 or counted.capped else ''} "
                  f"matching “{found.spelled()}”{'' if status == 'all' else f' ({status})'} "
                  f"{'is' if counted.value == 1 and not counted.capped else 'are'} {allowed} now "
                  f"and will be {done_as}, by a worker in the background. Messages stored "
                  f"after you confirm are left out; any whose status changes first are "
                  f"skipped.")  # fmt: skip
        question = f"{verb} all {counted} matching?"
        return confirm_page(question, detail, here, back, {"move": move})
    if not ActionForm().validate_on_submit():
        abort(400)
    job = bulk_jobs.start(move, found, current_user.email)
    target = url_for("bulk.show_job", job_id=job.id)
    if wants_fragment():
        return said(
            Response(status=204, headers={"HX-Redirect": target}), f"Job #{job.id} started."
        )
    return said(redirect(target), f"Job #{job.id} started: a worker picks it up at its next tick.")


@bp.get("/jobs/<int:job_id>")
def show_job(job_id: int) -> ResponseReturnValue:
    """A job's progress, live while it runs, and what it did."""
    job = bulk_jobs.job(job_id)
    if job is None:
        abort(404)
    context = dict(job=job, filter=Filter.from_json(job.filter), outcome=bulk_jobs.outcome(job),
                   running=job.state in ("queued", "running"))  # fmt: skip
    if wants_fragment():
        return fragment("messages/_job.html", 200 if context["running"] else 286, **context)
    response = Response(render_template("messages/job.html", **context))
    response.headers["Vary"] = "HX-Request"
    return response
