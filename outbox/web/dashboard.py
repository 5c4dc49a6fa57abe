"""The dashboard: how the queue is doing, what failed, which workers are alive."""

from datetime import timedelta

from flask import Blueprint, current_app, render_template, request
from flask_login import login_required

from .. import heartbeats, reports
from ..models import utcnow
from .forms import ActionForm, ResendAllForm

bp = Blueprint("dashboard", __name__)
bp.before_request(login_required(lambda: None))

CHART_HEIGHT = 120  # pixels of the tallest bar in the hourly chart


@bp.get("/")
def index() -> str:
    now = utcnow()
    hours = reports.hourly(now)
    peak = max((max(h.sent, h.failed) for h in hours), default=0) or 1
    oldest = reports.oldest_waiting()
    workers = heartbeats.recent(now)
    quiet_after = timedelta(seconds=2 * current_app.config["POLL_INTERVAL"])
    alive = [w for w in workers if now - w.last_seen_at <= quiet_after]
    return render_template(
        "dashboard.html",
        counts=reports.status_counts(),  # the tiles have no "all"
        oldest_age=(now - oldest) if oldest else None,
        hours=hours,
        scale=CHART_HEIGHT / peak,
        peak=peak,
        chart_height=CHART_HEIGHT,
        failures=reports.latest_failures(),
        workers=workers,
        alive=alive,
        failing=sorted((w for w in alive if w.fault), key=lambda w: w.fault_since or now),
        now=now,
        form=ActionForm(),
        resend_all=ResendAllForm(),
        requeued=request.args.get("requeued", type=int),
        confirm_needed=request.args.get("confirm") == "needed",
    )
