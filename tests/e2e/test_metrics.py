"""/metrics: refused without its token, gauges read at scrape, every process's counts in a drain."""

import os
import socket
import sys
import time
from pathlib import Path
from urllib import request as http

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from outbox import queue
from outbox.auth import tokens
from outbox.core.status import Status
from outbox.models import Message, WorkerBeat
from outbox.models.db import db
from outbox.ops import metrics
from tests.support import processes
from tests.support.api import auth
from tests.support.metrics import samples, value
from tests.support.pages import compose
from tests.support.statements import statements

TOKEN = "metrics-secret-token"
VALID = {"to": ["rcpt@example.com"], "subject": "Hello", "text": "Hello there"}


def test_observe_many_counts_as_observe_one_by_one():
    registry = CollectorRegistry()
    bounds = (0.1, 1, 5)
    one_by_one = Histogram("one", "one", buckets=bounds, registry=registry)
    many = Histogram("many", "many", buckets=bounds, registry=registry)
    values = [0.0, 0.1, 0.10001, 1, 4.9, 5, 5.1, 1e9, 0.05]
    for seconds in values:
        one_by_one.observe(seconds)
    metrics.observe_many(many, values)
    metrics.observe_many(many, [])
    found = samples(generate_latest(registry).decode())
    kept = {(name, labels): v for (name, labels), v in found.items() if "created" not in name}
    by_many = {(n[4:], labels): v for (n, labels), v in kept.items() if n.startswith("many")}
    by_one = {(n[3:], labels): v for (n, labels), v in kept.items() if n.startswith("one")}
    assert by_many == by_one and len(by_many) == len(bounds) + 1 + 2  # buckets, +Inf, count, sum
    assert value(found, "many_bucket", le="0.1") == 3
    assert value(found, "many_count") == len(values)


def test_metrics_are_not_served_without_a_token_set(app, client):
    assert app.config["METRICS_TOKEN"] is None
    assert client.get("/metrics").status_code == 404


def test_metrics_want_the_bearer_token(app, client):
    app.config["METRICS_TOKEN"] = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == "Bearer"
    answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert answer.mimetype == "text/plain"
    assert "Set-Cookie" not in answer.headers


@pytest.mark.all_databases
def test_gauges_are_read_from_the_database_at_scrape(app, client, make_message):
    app.config["METRICS_TOKEN"] = TOKEN
    for _ in range(3):
        make_message()
    queue.cancel(make_message().id)
    client.get("/api/messages/12345")  # an endpoint's name is its label, never the path
    with statements() as seen:
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    found = samples(answer.text)
    assert value(found, "outbox_messages", status="queued") == 3
    assert value(found, "outbox_messages", status="cancelled") == 1
    assert value(found, "outbox_messages", status="sent") == 0
    assert value(found, "outbox_oldest_due_seconds") >= 0
    assert value(found, "outbox_http_requests_total", endpoint="api.show_message",
                 status="401") >= 1  # fmt: skip
    assert not any("12345" in str(labels) for _, labels in found)
    # Cheap whatever the table's size: a count per status read no further than its cap, the
    # oldest due time and the workers' rows; besides, the guardrails' own small tables (a
    # week of hourly counts, the pauses), which never read the messages.
    counts = [q for q in seen if q.startswith("SELECT count(*)")]
    assert counts and all("LIMIT" in q for q in counts)
    guardrails = [q for q in seen if "guardrail_hours" in q or "domain_pauses" in q]
    assert guardrails and not any("messages" in q for q in guardrails)
    assert len(seen) == len(counts) + 2 + len(guardrails)


def test_enqueues_are_counted_by_source_api_and_compose(app, client, signed_in):
    app.config["METRICS_TOKEN"] = TOKEN
    token = tokens.create("shop")

    def enqueued() -> dict[str, float]:
        found = samples(client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text)
        return {
            s: value(found, "outbox_messages_enqueued_total", source=s) for s in ("api", "compose")
        }

    before = enqueued()
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "k1"}
    assert client.post("/api/messages", json=VALID, headers=headers).status_code == 201
    assert client.post("/api/messages", json=VALID, headers=headers).status_code == 201  # a repeat
    batch = {"messages": [VALID, VALID]}
    assert client.post("/api/messages/batch", json=batch, headers=auth(token)).status_code == 201
    assert compose(signed_in, to="rcpt@example.com", subject="Hi", text="Hello").status_code == 302
    after = enqueued()
    assert {s: after[s] - before[s] for s in after} == {"api": 3, "compose": 1}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, **headers: str) -> tuple[int, str]:
    with http.urlopen(http.Request(url, headers=headers), timeout=10) as answer:
        return answer.status, answer.read().decode()


def _post(url: str, body: bytes, **headers: str) -> int:
    sent = http.Request(url, data=body, method="POST",
                        headers={"Content-Type": "application/json", **headers})  # fmt: skip
    with http.urlopen(sent, timeout=10) as answer:
        return answer.status


def _wait_for(url: str, server) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + processes.START_TIMEOUT
    while True:
        assert server.poll() is None, "gunicorn exited"
        try:
            _get(url)
            return
        except OSError:
            assert time.monotonic() < deadline, "gunicorn did not answer"
            time.sleep(0.1)


def _sent(count: int) -> None:
    deadline = time.monotonic() + processes.START_TIMEOUT
    query = sa.select(sa.func.count()).where(Message.status == Status.SENT.value)
    while db.session.scalar(query) != count:
        db.session.commit()
        assert time.monotonic() < deadline, "the workers did not send"
        time.sleep(0.1)
    db.session.commit()


def _workers_seen(count: int) -> None:
    deadline = time.monotonic() + processes.START_TIMEOUT
    while db.session.scalar(sa.select(sa.func.count()).select_from(WorkerBeat)) < count:
        db.session.commit()
        assert time.monotonic() < deadline, "the workers did not beat"
        time.sleep(0.1)
    db.session.commit()


@pytest.mark.all_databases
def test_a_drain_through_gunicorn_and_two_workers_is_counted_in_full(smtp_app, smtp, tmp_path):
    """Every process writes to PROMETHEUS_MULTIPROC_DIR; one scrape adds them all up."""
    import json

    api_token = tokens.create("shop")
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    port = _free_port()
    env = dict(os.environ, OUTBOX_DATABASE_URL=smtp_app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_MAIL_PORT=str(smtp.port),
               OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com", OUTBOX_POLL_INTERVAL="0.3",
               OUTBOX_METRICS_TOKEN=TOKEN, PROMETHEUS_MULTIPROC_DIR=str(multiproc),
               OUTBOX_SECRET_KEY="test")  # fmt: skip
    env.pop("OUTBOX_LOG_FORMAT", None)
    gunicorn = [str(Path(sys.executable).parent / "gunicorn"), "--workers", "2",
                "--bind", f"127.0.0.1:{port}", "outbox:create_app()"]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "web.log").open("w") as web_log, \
         processes.group(gunicorn, env=env, stderr=web_log) as server:  # fmt: skip
        _wait_for(f"{base}/healthz", server)
        count = 40
        body = json.dumps(VALID).encode()
        for _ in range(count):
            assert _post(f"{base}/api/messages", body, Authorization=f"Bearer {api_token}") == 201
        with (
            (tmp_path / "worker.log").open("w") as log,
            processes.group(
                [sys.executable, "-m", "outbox", "worker", "--processes", "2"], env=env, stderr=log
            ),
        ):
            _sent(count)
            _workers_seen(2)
            # A scrape while the workers run: their files are read as they stand.
            status, text = _get(f"{base}/metrics", Authorization=f"Bearer {TOKEN}")
    assert status == 200
    found = samples(text)
    assert value(found, "outbox_messages_enqueued_total", source="api") == count
    assert value(found, "outbox_attempts_total", outcome="sent") == count
    assert value(found, "outbox_attempts_total", outcome="failed") == 0
    assert value(found, "outbox_smtp_replies_total", code_class="2xx") == count
    assert value(found, "outbox_send_seconds_count") == count
    assert value(found, "outbox_queue_delay_seconds_count") == count
    assert value(found, "outbox_queued_to_sent_seconds_count", stream="transactional") == count
    assert value(found, "outbox_queued_to_sent_seconds_bucket", stream="transactional",
                 le="3600.0") == count  # fmt: skip
    assert value(found, "outbox_send_seconds_bucket", le="+Inf") == count
    assert value(found, "outbox_messages", status="sent") == count
    assert value(found, "outbox_messages", status="queued") == 0
    assert value(found, "outbox_oldest_due_seconds") == 0
    seen = [
        v for (name, _), v in found.items() if name == "outbox_worker_last_seen_timestamp_seconds"
    ]
    assert len(seen) == 2  # the two processes of `outbox worker --processes 2`
    assert all(abs(moment - time.time()) < 60 for moment in seen)
    assert value(found, "outbox_http_requests_total", endpoint="api.create_message",
                 status="201") == count  # fmt: skip
    assert value(found, "outbox_http_request_seconds_count", endpoint="api.create_message",
                 status="201") == count  # fmt: skip
    assert len(smtp.received) == count
