"""/healthz and /readyz: the process, the database, the schema and the workers, without sessions."""

import socket
from datetime import timedelta

import pytest
from flask_migrate import downgrade, upgrade

from outbox import create_app
from outbox.models import utcnow
from outbox.models.db import db, dispose_engines
from outbox.ops import heartbeats
from tests.support.app import base_config
from tests.support.checks import revisions


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once it is closed


def test_healthz_answers_ok_without_a_database_or_a_cookie(tmp_path):
    url = f"mysql+pymysql://root@127.0.0.1:{_closed_port()}/none"
    app = create_app(base_config(url))
    app.instance_path = str(tmp_path)
    answer = app.test_client().get("/healthz")
    assert answer.status_code == 200
    assert answer.text == "ok\n"
    assert "Set-Cookie" not in answer.headers


@pytest.mark.all_databases
def test_readyz_names_each_check_and_sets_no_cookie(app, signed_in):
    answer = signed_in.get("/readyz")
    assert answer.status_code == 200, answer.json
    assert answer.json["ready"] is True
    checks = answer.json["checks"]
    assert set(checks) == {"database", "schema"}
    head, _ = revisions(app)
    assert checks["schema"] == {"ok": True, "at": head, "head": head}
    assert "Set-Cookie" not in answer.headers


def test_readyz_fails_when_the_database_is_unreachable(tmp_path):
    url = f"mysql+pymysql://root@127.0.0.1:{_closed_port()}/none"
    app = create_app(base_config(url))
    app.instance_path = str(tmp_path)
    answer = app.test_client().get("/readyz")
    assert answer.status_code == 503
    checks = answer.json["checks"]
    assert checks["database"]["ok"] is False
    assert "Can't connect" in checks["database"]["error"]
    assert checks["schema"] == {"ok": False, "error": "not checked: the database failed"}


def test_readyz_fails_when_the_database_file_is_gone(tmp_path):
    app = create_app(base_config(f"sqlite:///{tmp_path / 'gone' / 'outbox.sqlite3'}"))
    app.instance_path = str(tmp_path)
    answer = app.test_client().get("/readyz")
    assert answer.status_code == 503
    assert answer.json["checks"]["database"]["ok"] is False


@pytest.mark.all_databases
def test_readyz_fails_while_the_schema_is_behind(app, client):
    db.session.remove()
    dispose_engines()
    downgrade(revision="-1")
    try:
        answer = client.get("/readyz")
        assert answer.status_code == 503
        head, before = revisions(app)
        assert answer.json["checks"]["schema"] == {"ok": False, "at": before, "head": head}
        assert answer.json["checks"]["database"] == {"ok": True}
    finally:
        upgrade()
    assert client.get("/readyz").status_code == 200


def test_readyz_fails_on_a_database_never_migrated(tmp_path):
    app = create_app(base_config(f"sqlite:///{tmp_path / 'empty.sqlite3'}"))
    app.instance_path = str(tmp_path)
    answer = app.test_client().get("/readyz")
    assert answer.status_code == 503
    schema = answer.json["checks"]["schema"]
    assert schema["ok"] is False and "alembic_version" in schema["error"]


@pytest.mark.all_databases
def test_readyz_needs_a_worker_seen_within_two_poll_intervals_when_told(app, client):
    app.config.update(READY_NEEDS_WORKER=True, POLL_INTERVAL=20.0)
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json["checks"]["worker"]["ok"] is False
    assert answer.json["checks"]["worker"]["last_seen_seconds_ago"] is None
    long_ago = utcnow() - timedelta(seconds=41)
    heartbeats.beat("old:1:a", long_ago, 0, now=long_ago)
    assert client.get("/readyz").status_code == 503
    heartbeats.beat("new:2:b", utcnow(), 0)
    answer = client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json["checks"]["worker"]["ok"] is True
    app.config["READY_NEEDS_WORKER"] = False
    assert "worker" not in client.get("/readyz").json["checks"]


def test_ready_needs_worker_is_read_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OUTBOX_READY_NEEDS_WORKER", "true")
    app = create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}"))
    assert app.config["READY_NEEDS_WORKER"] is True


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_a_wrong_method_on_a_probe_is_a_plain_405_without_a_cookie(client, path):
    answer = client.post(path)
    assert answer.status_code == 405
    assert "Set-Cookie" not in answer.headers
