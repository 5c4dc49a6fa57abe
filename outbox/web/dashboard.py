"""The dashboard: how the queue is doing, what failed, which workers are alive; kept live."""

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from outbox import queue
from outbox.auth import audit
from outbox.capabilities import routes, throttle
from outbox.capabilities.guardrails import board as guardrails
from outbox.core import charts
from outbox.core.charts import Window
from outbox.models import WorkerBeat, utcnow
from outbox.ops import charts as figures
from outbox.ops import detail, heartbeats, pause, reports
from outbox.web import confirm
from outbox.web.forms import ActionForm, ResendAllForm
from outbox.web.notice import is_htmx, said
from outbox.web.roles import requires

bp = Blueprint("dashboard", __name__)
bp.before_request(login_required(lambda: None))

LATENCY_WINDOW = timedelta(hours=1)  # the sent messages whose queue-to-250 a tile shows
CHART_HEIGHT = 120  # pixels of the tallest bar in the hourly chart
# The page asks for its live part this often (templates/dashboard.html says it to htmx;
# static/live.js pauses it while the tab is hidden). It never stops by itself (no 286):
# a dashboard left open is there to see new mail come and go.
REFRESH_SECONDS = 5
# Where server-sent events get through, the page takes its live part from /live/events
# instead (static/live.js), pushed when it changes; each connection ends after
# LIVE_STREAM_SECONDS and the page connects again. A connection lost otherwise is
# tried again this long after (the events' retry field).
RECONNECT_MS = 1000
# What the pause and resume buttons ask first (outbox.web.confirm).
PAUSE_DETAIL = ("Every worker stops claiming messages within one poll interval; those in hand "
                "are sent. Messages are still queued and wait until sending resumes.")  # fmt: skip
RESUME_DETAIL = "The workers send the waiting messages from their next tick on."


def tiles(now: datetime) -> dict[str, Any]:
    """What the tiles show: a count per status, when the longest waiting became due, and
    how long the messages sent in the last hour took from queued to the server's 250."""
    due = reports.oldest_waiting(now)
    age = (now - due) if due else None
    latency = reports.latency(now - LATENCY_WINDOW)
    return dict(counts=reports.status_counts(), oldest_due=due, oldest_age=age,
                streams=reports.waiting_by_stream(), latency=latency)  # fmt: skip


def _warning_id(worker: WorkerBeat) -> str:
    """An id that stays the same while the same fault of the same worker does (hx-preserve)."""
    said = f"{worker.worker_id}\0{worker.fault_since}\0{worker.fault}"
    return "fault-" + hashlib.sha256(said.encode()).hexdigest()[:16]


def _window() -> Window:
    return charts.window(request.values.get("window"))


def _live(now: datetime, window: Window | None = None) -> dict[str, Any]:
    """Everything the live part of the page shows."""
    window = window or _window()
    hours = reports.hourly(now)
    peak = max((max(h.sent, h.failed) for h in hours), default=0) or 1
    workers = heartbeats.recent(now)
    quiet_after = timedelta(seconds=2 * current_app.config["POLL_INTERVAL"])
    alive = [w for w in workers if now - w.last_seen_at <= quiet_after]
    return dict(
        tiles(now),
        hours=hours,
        scale=CHART_HEIGHT / peak,
        peak=peak,
        chart_height=CHART_HEIGHT,
        failures=reports.latest_failures(),
        workers=workers,
        alive=alive,
        failing=[
            (w, _warning_id(w))
            for w in sorted((w for w in alive if w.fault), key=lambda w: w.fault_since or now)
        ],
        now=now,
        form=ActionForm(),
        resend_all=ResendAllForm(),
        refresh=REFRESH_SECONDS,
        paused=pause.current(),
        throttled=throttle.slowed(now),
        guardrails=guardrails.board(now),
        window=window,
        # The default window's URLs name none: / and /live/events, as before windows.
        window_args={} if window == charts.DEFAULT_WINDOW else {"window": window.key},
        windows=charts.WINDOWS.values(),
        stream_charts=figures.per_stream(window, now),
        failed=figures.failures(now),
        in_hand=figures.in_hand(),
        lanes=routes.table().lanes,
        error_term=charts.error_term,
    )


def _answer(html: str) -> Response:
    response = Response(html)
    response.headers["Vary"] = "HX-Request"
    return response


@bp.get("/")
def index() -> Response:
    """The page; for htmx's poll, only its live part."""
    context = _live(utcnow())
    if is_htmx():
        return _answer(render_template("_live.html", **context))
    return _answer(render_template(
        "dashboard.html",
        confirm_needed=request.args.get("confirm") == "needed",
        **context,
    ))  # fmt: skip


def event(name: str, html: str) -> str:
    """One server-sent event: its name, and the html as data lines."""
    data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: {name}\n{data}\n"


class Streams:
    """The event connections this process holds open, at most LIVE_STREAMS at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0

    def take(self, most: int) -> Callable[[], None] | None:
        """A place for one more connection, and what gives it back (once, however often
        it is called); None when every place is taken."""
        with self.lock:
            if self.open >= most:
                return None
            self.open += 1
        given: list[bool] = []

        def give_back() -> None:
            with self.lock:
                if not given:
                    given.append(True)
                    self.open -= 1

        return give_back


def _streams() -> Streams:
    """This app's event connections (one app a process in production; tests make many)."""
    found = current_app.extensions.get("live_streams")
    if found is None:
        found = current_app.extensions.setdefault("live_streams", Streams())
    return found  # type: ignore[no-any-return]


@bp.get("/live/events")
def events() -> Response:
    """The live part as server-sent events (htmx's sse extension): now, then whenever it
    changes, looked at every LIVE_PUSH_INTERVAL; after LIVE_STREAM_SECONDS an "end" event
    and the end of the answer, so that it holds a sync worker only that long, and the
    page connects again (static/live.js). Past LIVE_STREAMS connections in this process,
    503: that page polls instead, and the threads stay free for the API."""
    every = float(current_app.config["LIVE_PUSH_INTERVAL"])
    lifetime = float(current_app.config["LIVE_STREAM_SECONDS"])
    give_back = _streams().take(int(current_app.config["LIVE_STREAMS"]))
    if give_back is None:
        busy = Response("live events are busy in this process: the page polls instead\n",
                        status=503, mimetype="text/plain")  # fmt: skip
        busy.headers["Retry-After"] = str(int(lifetime) or 1)
        busy.headers["Cache-Control"] = "no-store"
        return busy

    def stream() -> Iterator[str]:
        try:
            ends = time.monotonic() + lifetime
            yield f"retry: {RECONNECT_MS}\n\n"
            last = None
            while True:
                html = render_template("_live.html", **_live(utcnow()))  # ?window= as asked
                figures.end_reads()  # the next look reads what was written since
                # A comment when nothing changed: a client gone away is found at the write.
                yield event("live", html) if html != last else ": unchanged\n\n"
                last = html
                left = ends - time.monotonic()
                if left <= 0:
                    yield event("end", "end")  # the page closes it and opens another
                    return
                time.sleep(min(every, left))
        finally:  # ended, or closed by the server when the client went away
            give_back()

    response = Response(stream_with_context(stream()), mimetype="text/event-stream")
    response.call_on_close(give_back)  # also when the stream never started (HEAD)
    response.headers["Cache-Control"] = "no-store"  # as every page: signed-in content
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


@bp.post("/failures/<int:message_pk>/resend")
@requires("resend")
def resend(message_pk: int) -> ResponseReturnValue:
    """Resend one failed message; htmx gets its row and, out of band, the tiles it changed."""
    if not ActionForm().validate_on_submit():
        abort(400)
    if detail.message(message_pk) is None:
        abort(404)
    try:
        queue.resend(message_pk, current_app.config["MAX_ATTEMPTS"])
    except queue.MoveRefused as exc:
        abort(409, description=str(exc))
    audit.record("resend", message_pk)
    done = f"Message #{message_pk} is queued again."
    if not is_htmx():
        return said(redirect(url_for("dashboard.index")), done)
    message = detail.message(message_pk, fresh=True)
    now = utcnow()
    return said(_answer(render_template("_failure_row.html", m=message, form=ActionForm(),
                                        now=now, oob_tiles=True, **tiles(now))), done)  # fmt: skip


@bp.post("/pause")
@requires("pause")
def pause_sending() -> ResponseReturnValue:
    """Pause sending, once confirmed; an earlier pause stays as it was."""
    if not ActionForm().validate_on_submit():
        abort(400)
    reason = request.form.get("reason", "")
    if not confirm.confirmed():
        return confirm.confirm_page(
            "Pause sending?", PAUSE_DETAIL, request.path, url_for("dashboard.index"),
            {"reason": reason},
        )  # fmt: skip
    held, made = pause.pause(current_user.email, reason)
    if made:
        audit.record("pause", detail=reason or None)
        return said(live_part(), "Sending is paused: the workers stop claiming messages.")
    return said(live_part(), f"Sending was paused already, by {held.paused_by}.")


@bp.post("/resume")
@requires("pause")
def resume_sending() -> ResponseReturnValue:
    """Resume sending, once confirmed: the workers claim again at their next tick."""
    if not ActionForm().validate_on_submit():
        abort(400)
    if not confirm.confirmed():
        return confirm.confirm_page("Resume sending?", RESUME_DETAIL, request.path,
                                    url_for("dashboard.index"))  # fmt: skip
    # None if it was not paused (resumed elsewhere meanwhile): nothing to record.
    if pause.resume() is not None:
        audit.record("resume")
        return said(live_part(), "Sending resumes: the workers send the waiting messages.")
    return said(live_part(), "Sending was not paused: nothing changed.")


def live_part() -> ResponseReturnValue:
    """After an action on the dashboard: for htmx its live part, else the page again."""
    if not is_htmx():
        return redirect(url_for("dashboard.index"))
    return _answer(render_template("_live.html", **_live(utcnow())))
