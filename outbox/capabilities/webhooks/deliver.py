"""The workers' webhook job: take back dead workers' claims, send due deliveries signed,
all of a claim at once, all cut off at WEBHOOK_TIMEOUT or when the worker stops, and
write what came of each."""

import concurrent.futures
import functools
import logging
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from flask import Flask, current_app

from outbox.capabilities.webhooks import post, safety, signing, store
from outbox.models import utcnow
from outbox.models.db import db

log = logging.getLogger("outbox.webhooks")
BATCH = 8  # deliveries claimed at a time and sent side by side, a thread each
STOP_CHECK = 0.1  # seconds between looks at the stop flag while requests are in flight
STOP_GRACE = 3.0  # seconds a stopping worker lets the requests under way finish


@dataclass
class Tally:
    delivered: int = 0
    retrying: int = 0  # failed this time, tried again later
    disabled: int = 0  # endpoints disabled after a delivery's last retry
    reclaimed: int = 0  # taken back from workers that died

    def __str__(self) -> str:
        return (f"webhooks: delivered {self.delivered}, to retry {self.retrying}, endpoints "
                f"disabled {self.disabled}, taken back {self.reclaimed}")  # fmt: skip


def run_due(worker_id: str, stop: threading.Event | None = None,
            now: datetime | None = None) -> Tally:  # fmt: skip
    """Deliver every due delivery of the enabled endpoints (app context needed)."""
    config = current_app.config
    timeout = config["WEBHOOK_TIMEOUT"]
    tally = Tally(reclaimed=store.release_stale(store.lease(timeout), now))
    while not (stop and stop.is_set()):
        claimed = store.claim(worker_id, BATCH, now)
        if not claimed:
            break
        results = send_all(claimed, config, stop)
        disabled = store.record(worker_id, results, now or utcnow())
        for endpoint_id in disabled:
            log.warning("%s: webhook endpoint %d disabled: a delivery failed its last retry",
                        worker_id, endpoint_id)  # fmt: skip
        tally.delivered += sum(answer.delivered for _, answer in results)
        tally.retrying += sum(not answer.delivered for _, answer in results)
        tally.disabled += len(disabled)
    if tally.delivered or tally.retrying or tally.reclaimed:
        log.info("%s: %s", worker_id, tally, extra={"worker_id": worker_id})
    return tally


def send_all(
    claimed: list[store.Claimed], config: Mapping[str, Any], stop: threading.Event | None = None
) -> list[tuple[store.Claimed, post.Answer]]:
    """Send each claimed delivery in a thread of its own, all ended by one cutoff; return
    once every thread has (no thread is left behind to pile up run after run).

    A stop lets the requests under way have STOP_GRACE more, then cuts them: an outcome
    cut is a failed attempt, sent again later.
    """
    timeout = config["WEBHOOK_TIMEOUT"]
    context = _tls_context(config["WEBHOOK_CA_FILE"])
    allow = bool(config["WEBHOOK_ALLOW_PRIVATE"])
    cutoff = post.Cutoff(timeout)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(claimed)) as pool:
        futures = [pool.submit(send_one, c, cutoff, context, allow) for c in claimed]
        stopped_at = None
        while concurrent.futures.wait(futures, timeout=STOP_CHECK).not_done:
            if stopped_at is None and stop is not None and stop.is_set():
                stopped_at = time.monotonic()
            if stopped_at is not None and time.monotonic() - stopped_at >= STOP_GRACE:
                cutoff.cut("the worker is stopping")
    return [(c, f.result()) for c, f in zip(claimed, futures, strict=True)]


def send_one(claimed: store.Claimed, cutoff: post.Cutoff, context: ssl.SSLContext,
             allow_private: bool) -> post.Answer:  # fmt: skip
    """Resolve and check the endpoint's host, sign, POST; never raises."""
    try:
        target = safety.resolve(claimed.url, allow_private)
    except safety.Refused as exc:
        return post.Answer(None, 0, None, str(exc))
    headers = signing.headers(claimed.secret, claimed.event_id, claimed.payload)
    return post.post(target, claimed.payload.encode(), headers, cutoff, context)


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    return post.tls_context(ca_file)


def warn_unsafe(config: Mapping[str, Any]) -> None:
    """Log the opt-out of the private-address check, at every worker start."""
    if config["WEBHOOK_ALLOW_PRIVATE"]:
        log.warning("OUTBOX_WEBHOOK_ALLOW_PRIVATE=true: webhooks may reach private, loopback "
                    "and link-local addresses, the internal network included")  # fmt: skip


def schedule(scheduler: BaseScheduler, app: Flask, worker: Any) -> None:
    """Add the webhook job to a worker's scheduler, beside the drain, in a thread of its own."""

    def tick() -> None:
        with app.app_context():
            try:
                run_due(worker.worker_id, worker.stop)
            except Exception:
                db.session.rollback()
                log.exception("%s: webhook run failed", worker.worker_id)

    interval = app.config["WEBHOOK_INTERVAL"]
    scheduler.add_job(
        tick, "interval", seconds=interval, id="webhooks", max_instances=1, coalesce=True,
        next_run_time=datetime.now(UTC) + timedelta(seconds=interval / 2),
    )  # fmt: skip
