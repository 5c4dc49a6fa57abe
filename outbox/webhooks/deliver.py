"""The workers' webhook job: take back dead workers' claims, send due deliveries signed,
all of a claim at once, each cut off at WEBHOOK_TIMEOUT, and write what came of each."""

import concurrent.futures
import functools
import logging
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from flask import Flask, current_app

from ..extensions import db
from ..models import utcnow
from . import post, safety, signing, store

log = logging.getLogger("outbox.webhooks")
BATCH = 8  # deliveries claimed at a time and sent side by side, a thread each


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
        results = send_all(claimed, config)
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


def send_all(claimed: list[store.Claimed],
             config: Mapping[str, Any]) -> list[tuple[store.Claimed, post.Answer]]:  # fmt: skip
    """Send each claimed delivery in a thread of its own; wait for none past the timeout.

    A request still running then (a name that does not resolve, a server answering a
    byte at a time) is counted as timed out and left to end on its own.
    """
    timeout = config["WEBHOOK_TIMEOUT"]
    context = _tls_context(config["WEBHOOK_CA_FILE"])
    allow = bool(config["WEBHOOK_ALLOW_PRIVATE"])
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(claimed))
    try:
        futures = [pool.submit(send_one, c, timeout, context, allow) for c in claimed]
        concurrent.futures.wait(futures, timeout=timeout + 1)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    late = post.Answer(None, round(timeout * 1000), None, f"no answer within {timeout:g}s")
    return [(c, f.result() if f.done() else late) for c, f in zip(claimed, futures, strict=True)]


def send_one(claimed: store.Claimed, timeout: float, context: ssl.SSLContext,
             allow_private: bool) -> post.Answer:  # fmt: skip
    """Resolve and check the endpoint's host, sign, POST; never raises."""
    try:
        target = safety.resolve(claimed.url, allow_private)
    except safety.Refused as exc:
        return post.Answer(None, 0, None, str(exc))
    headers = signing.headers(claimed.secret, claimed.event_id, claimed.payload)
    return post.post(target, claimed.payload.encode(), headers, timeout, context)


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
