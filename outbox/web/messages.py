"""The outbox pages: the list, one message, composing, and the buttons that act on them."""

from dataclasses import replace
from typing import Any

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required
from werkzeug.datastructures import MultiDict

from outbox import queue
from outbox.auth import audit
from outbox.capabilities import bulk_jobs
from outbox.capabilities.bounces import inbox
from outbox.capabilities.capture import store as captured
from outbox.capabilities.mailings import render as mailing_render
from outbox.capabilities.submission import shown as raw_shown
from outbox.core.filters import NAMES, Filter, FilterError
from outbox.core.filters import parse as parse_filter
from outbox.core.latency import queue_to_sent
from outbox.core.recipients import partly_delivered
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import ID_RANGE, Message, utcnow
from outbox.models.db import db
from outbox.ops import detail, pause, reports
from outbox.queue.wire import recipient_json
from outbox.web import compose as composing
from outbox.web import dashboard
from outbox.web.confirm import CANCEL, SEND_AGAIN, Ask, ask_first
from outbox.web.downloads import as_download
from outbox.web.forms import ActionForm, ResendAllForm
from outbox.web.notice import is_htmx, plural, refused, said
from outbox.web.roles import requires
from outbox.web.shown import (
    INLINE_SHOWN_BYTES,
    SHOWN_HTML_CHARS,
    back_to,
    inline_images,
    loads_remote,
    shown_part,
    with_inline,
    without_remote,
)

bp = Blueprint("messages", __name__, url_prefix="/messages")
bp.before_request(login_required(lambda: None))

TABS = ["all", *(status.value for status in Status)]
STREAMS = [stream.value for stream in Stream]
# What the HTML body of a message may do inside its iframe: show itself, nothing more.
BODY_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
COPIES_SHOWN = 20  # "sent again as #40, #41, ...": the first this many copies


def fragment(template: str, status: int = 200, /, **context: Any) -> Response:
    """A partial page for htmx; 286 tells htmx to stop polling once nothing is in flight."""
    response = Response(render_template(template, **context), status=status)
    response.headers["Vary"] = "HX-Request"
    return response


def wants_fragment() -> bool:
    return bool(request.headers.get("HX-Request")) and not request.headers.get("HX-Boosted")


def read_filter(args: Any) -> tuple[str, Filter]:
    """The tab and the filter of the list's query arguments (the search box's grammar in
    q, the filter form's fields beside it); 404 for no such tab, FilterError for a bad term.

    A status: term chooses the tab; the tab is kept apart from the filter's other terms
    in every link, as the tabs' own links do."""
    status = args.get("status", "all")
    if status not in TABS:
        abort(404)
    fields = {name: args.getlist(name) for name in NAMES if name != "status"}
    found = parse_filter(
        args.get("q", ""), MultiDict([(k, v) for k, vs in fields.items() for v in vs])
    )
    if found.status is not None:
        status = found.status
    elif status != "all":
        found = replace(found, status=status)
    return status, found


def listing(args: Any, notice: str | None = None) -> dict[str, Any]:
    """What the list shows for its query arguments (tab, filter, page); 400 or 404 if bad.

    A filter with a bad term answers 400 with the page saying which term and why."""
    before = args.get("before", type=int)
    if before is not None and before not in ID_RANGE:
        abort(400, description="before must be a message id")
    error = None
    try:
        status, found = read_filter(args)
    except FilterError as exc:
        status = args.get("status", "all") if args.get("status", "all") in TABS else "all"
        found, error = Filter(status=None if status == "all" else status), str(exc)
    spelled = found.spelled() or None
    if error is None:
        page = reports.page(found.status, None, before, of=found)
    else:
        page = reports.Page([], None, None)
    can_move = {move: can_bulk_move(found, move) for move in bulk_jobs.MOVES} if not error else {}
    # "Resend all N matching": counted here only where an index serves the filter; else
    # on the confirmation page, which a person asks for.
    ceiling = reports.highest_id() if can_move and not found.windowed else 0
    counted = {move: reports.movable_count(found, bulk_jobs.statuses(move), ceiling,
                                           cap=reports.BULK_COUNT_CAP)
               for move, able in can_move.items() if able and ceiling}  # fmt: skip
    return dict(page=page, status=status, search=spelled, before=before, tabs=TABS,
                filter=found, error=error, typed=args.get("q", "").strip(),
                streams=STREAMS, statuses=[s.value for s in Status],
                counts=reports.counts(), notice=notice, form=ActionForm(), paused=pause.current(),
                matches=reports.filter_matches(found, before) if spelled and not error else None,
                movable=can_move, movable_counts=counted,
                here=url_for("messages.index", status=status, q=spelled,
                             before=before))  # fmt: skip


def can_bulk_move(found: Filter, move: str) -> bool:
    """Whether a filter's messages could include some a bulk move takes (by their status)."""
    if not found.active:
        return False
    return found.status is None or Status(found.status) in bulk_jobs.statuses(move)


@bp.get("")
def index() -> ResponseReturnValue:
    context = listing(request.args)
    if wants_fragment():
        code = 400 if context["error"] else 200 if context["page"].in_flight else 286
        return fragment("messages/_listing.html", code, **context)
    response = Response(render_template("messages/index.html", **context),
                        status=400 if context["error"] else 200)  # fmt: skip
    response.headers["Vary"] = "HX-Request"
    return response


def _message(message_pk: int, *, fresh: bool = False) -> Message:
    found = detail.message(message_pk, fresh=fresh)
    if found is None:
        abort(404)
    return found


def _state(message: Message) -> dict[str, Any]:
    return dict(message=message, attempts=detail.attempts(message.id),
                recipients=[recipient_json(entry, message) for entry in message.recipients],
                partly=partly_delivered(message.recipients, message.status),
                copies=detail.copies(message.id, COPIES_SHOWN),
                form=ActionForm(), in_flight=message.status in reports.IN_FLIGHT,
                took=queue_to_sent(message.created_at, message.sent_at),
                editable=composing.editable(message),
                now=utcnow())  # fmt: skip


@bp.get("/<int:message_pk>")
def show(message_pk: int) -> ResponseReturnValue:
    message = _message(message_pk)
    mailing_render.onto(message)  # mailings: rendered on view
    parts = raw_shown.onto(message)  # submission: read out of the stored mail
    state = _state(message)
    if wants_fragment():
        return fragment("messages/_state.html", 200 if state["in_flight"] else 286, **state)
    response = Response(render_template(
        "messages/show.html",
        attachments=detail.attachments(message.id),
        back=back_to(request.args.get("back")),
        remote_images=loads_remote(shown_part(message.html_body)),
        html_cut=len(message.html_body or "") > SHOWN_HTML_CHARS,
        html_shown=SHOWN_HTML_CHARS,
        events=audit.of_message(message.id),
        bounces=inbox.of_message(message.id),
        captured=captured.of_message(message.id),
        raw_parts=parts,
        other_parts=raw_shown.other_parts(message),
        **state,
    ))  # fmt: skip
    response.headers["Vary"] = "HX-Request"
    return response


@bp.get("/<int:message_pk>/body.html")
def html_body(message_pk: int) -> ResponseReturnValue:
    """The HTML body alone, for the sandboxed iframe on the message page."""
    message = _message(message_pk)
    mailing_render.onto(message)  # mailings: rendered on view
    raw_shown.onto(message)
    html = with_inline(without_remote(shown_part(message.html_body)), _inline_images(message))
    response = Response(html, mimetype="text/html")
    response.headers["Content-Security-Policy"] = BODY_POLICY
    return response


def _inline_images(message: Message) -> dict[str, str]:
    """The message's inline images, as data: URLs by Content-ID, for its HTML body."""
    if not message.html_body or not message.attachment_count or message.raw_size is not None:
        return {}
    if message.mailing_id:  # mailings: the mailing's files, read once a process
        files = mailing_render.attachments(message.mailing_id, message.attachment_count)
    else:
        files = queue.read_inline(message.id, INLINE_SHOWN_BYTES)
    db.session.commit()
    return inline_images(files)


@bp.get("/<int:message_pk>/attachments/<int:attachment_id>")
def download(message_pk: int, attachment_id: int) -> ResponseReturnValue:
    """One attachment, streamed chunk by chunk, always as a download."""
    attachment = detail.attachment(message_pk, attachment_id)
    if attachment is None:
        abort(404)
    chunks = detail.attachment_bytes(attachment_id)
    response = Response(stream_with_context(chunks), mimetype="application/octet-stream")
    response.headers["Content-Length"] = str(attachment.size)
    return as_download(response, attachment.filename)


@bp.get("/<int:message_pk>/mail.eml")
def raw_mail(message_pk: int) -> ResponseReturnValue:
    """A mail handed over by SMTP as outbox stores and sends it, as a download."""
    message = _message(message_pk)
    if message.raw_size is None or message.bodies_dropped_at is not None:
        abort(404)
    stream = stream_with_context(raw_shown.chunks(message.id))
    response = Response(stream, mimetype="message/rfc822")
    response.headers["Content-Length"] = str(message.raw_size)
    return as_download(response, f"outbox-{message.id}.eml")


def _acted(message_pk: int) -> ResponseReturnValue:
    """After a button: the new state for htmx, or back to the page without JavaScript."""
    if wants_fragment():
        message = _message(message_pk, fresh=True)
        return fragment("messages/_state.html", **_state(message))
    return redirect(url_for("messages.show", message_pk=message_pk))


def _act(message_pk: int, move: Any, ask: Ask | None = None, *, action: str,
         done: str) -> ResponseReturnValue:  # fmt: skip
    """Make the move once asked; the new state with a notice saying done (or why not)."""
    if not ActionForm().validate_on_submit():
        abort(400)
    asked = ask_first(_message(message_pk), ask)
    if asked is not None:
        return asked
    try:
        move()
    except queue.MoveRefused as exc:
        abort(409, description=str(exc))
    audit.record(action, message_pk)
    return said(_acted(message_pk), done.format(pk=message_pk))


@bp.post("/<int:message_pk>/resend")
@requires("resend")
def resend(message_pk: int) -> ResponseReturnValue:
    allowance = current_app.config["MAX_ATTEMPTS"]
    return _act(
        message_pk,
        lambda: queue.resend(message_pk, allowance),
        action="resend",
        done="Message #{pk} is queued again.",
    )


@bp.post("/<int:message_pk>/cancel")
@requires("cancel")
def cancel(message_pk: int) -> ResponseReturnValue:
    return _act(
        message_pk,
        lambda: queue.cancel(message_pk),
        CANCEL,
        action="cancel",
        done="Message #{pk} is cancelled: it will not be sent.",
    )


@bp.post("/<int:message_pk>/send-now")
@requires("send_now")
def send_now(message_pk: int) -> ResponseReturnValue:
    return _act(
        message_pk,
        lambda: queue.send_now(message_pk),
        action="send_now",
        done="Message #{pk} is due now: a worker sends it at its next tick.",
    )


@bp.post("/<int:message_pk>/send-again")
@requires("send_again")
def send_again(message_pk: int) -> ResponseReturnValue:
    if not ActionForm().validate_on_submit():
        abort(400)
    asked = ask_first(_message(message_pk), SEND_AGAIN)
    if asked is not None:
        return asked
    source = f"web:{current_user.email}"
    try:
        new = queue.send_again(message_pk, source, current_app.config["MAX_ATTEMPTS"])
    except queue.MoveRefused as exc:
        abort(409, description=str(exc))
    audit.record("send_again", message_pk, {"copy": new.id})
    target = url_for("messages.show", message_pk=new.id)
    flash(f"Message #{message_pk} is sent again as #{new.id}, queued now.")  # shown on the copy
    if wants_fragment():
        return Response(status=204, headers={"HX-Redirect": target})
    return redirect(target)


@bp.post("/resend-failed")
@requires("resend_all")
def resend_failed() -> ResponseReturnValue:
    """Queue every failed message again, once the confirmation box is ticked."""
    form = ResendAllForm()
    if not form.validate_on_submit():
        if is_htmx():
            return refused("Tick the box to confirm: nothing was resent.")
        return redirect(url_for("dashboard.index", confirm="needed"))
    count = queue.resend_all_failed(current_app.config["MAX_ATTEMPTS"])
    audit.record("resend_all", detail={"requeued": count})
    return said(dashboard.live_part(), resent_all(count, reports.status_counts()["failed"]))


def resent_all(count: int, left: reports.Count) -> str:
    """What "Resend all failed" did, and why those still failed stay so."""
    if count == 0 and left.value == 0:
        return "Nothing was resent: no message is failed now."
    words = f"{plural(count, 'failed message')} queued again."
    if left.value:
        words += (f" {left} stay{'s' if left.value == 1 else ''} failed: every recipient of "
                  f"{'it' if left.value == 1 else 'each'} is on the suppression list.")  # fmt: skip
    return words


@bp.route("/new", methods=["GET", "POST"])
@requires("compose")
def compose() -> ResponseReturnValue:
    return composing.compose()  # the page lives in web/compose.py


@bp.get("/new/suppressed")
@requires("compose")
def compose_check() -> ResponseReturnValue:
    return composing.typed_check()  # the compose page's check as an address field is left
