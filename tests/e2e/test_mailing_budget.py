"""Mailing templates past their budget, against a running worker and the API: the recipient
fails naming the limit, the rest of the queue goes on, the worker stops on SIGTERM at once
and its memory stays put; at intake the same templates are a 422 within moments."""

import json
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db
from tests.support import processes
from tests.support.mailing_helpers import MAILINGS, body, post, rows_of
from tests.support.workers import OUTBOX, wait_until, worker_env

LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
HUGE = "{{ 'x' * 120000000 }}"
# A call on a 20 MB string in each of 90,000 loop turns: within the steps, past the seconds.
SLOW = (
    "{% with big = 'x' * 20000000 %}{% for i in range(90000) %}{{ big.count('y') }}"
    "{% endfor %}{% endwith %}"
)
DEADLINE = 60  # seconds for what takes well under one; a busy machine is slow
MARIADB = [pytest.param("mariadb", marks=pytest.mark.mariadb)]


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return tokens.create("shop")


def _when(flag: str, source: str) -> str:
    return f"{{% if {flag} %}}{source}{{% endif %}}"


def _recipient(email: str, **flags: bool) -> dict:  # type: ignore[type-arg]
    fields = {"first": email.split("@")[0], "plan": "p", "loops": False, "huge": False}
    return {"email": email, "fields": {**fields, **flags}}


def _peak_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _by_address(mailing_id: int) -> dict[str, Message]:
    db.session.expire_all()
    return {row.recipients[0]["address"]: row for row in rows_of(mailing_id)}


def _settled(mailing_id: int) -> bool:
    return all(row.status in ("sent", "failed") for row in _by_address(mailing_id).values())


@pytest.mark.parametrize("db_kind", MARIADB)
def test_a_bomb_fails_its_recipient_and_the_running_worker_sends_on(
    smtp_app, smtp, client, token, tmp_path
):
    """The first recipient is the one intake renders; the others take the bombs' branches."""
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=0.2, SECRET_KEY="test")
    with (tmp_path / "worker.log").open("w") as log, \
         processes.group([*OUTBOX, "worker"], env=env, stderr=log) as worker:  # fmt: skip
        first = post(client, token, body([_recipient("warm@example.com")])).get_json()
        wait_until(lambda: _settled(first["id"]), DEADLINE)  # what a worker loads to send, loaded
        before = _peak_mib(worker.pid)
        text = "Hi {{ first }}." + _when("loops", LOOPS) + _when("huge", HUGE)
        people = [_recipient("ann@example.com"), _recipient("bob@example.com", loops=True),
                  _recipient("cy@example.com", huge=True)]  # fmt: skip
        answer = post(client, token, body(people, text=text))
        assert answer.status_code == 201, answer.get_json()
        mailing = answer.get_json()["id"]
        wait_until(lambda: _settled(mailing), DEADLINE)
        plain = client.post("/api/messages", headers={"Authorization": f"Bearer {token}"},
                            json={"from": "shop@example.com", "to": ["dee@example.com"],
                                  "subject": "after", "text": "the queue goes on"})  # fmt: skip
        assert plain.status_code == 201
        wait_until(lambda: any(r.rcpt_tos == ["dee@example.com"] for r in smtp.received),
                   DEADLINE)  # fmt: skip
        grown = _peak_mib(worker.pid) - before
        assert processes.end(worker) == 0
    rows = _by_address(mailing)
    assert rows["ann@example.com"].status == "sent"
    bob, cy = rows["bob@example.com"], rows["cy@example.com"]
    assert bob.status == cy.status == "failed"
    assert "more than 100,000 steps" in (bob.last_error or ""), bob.last_error
    assert "past the mail size limit" in (cy.last_error or ""), cy.last_error
    assert {r.rcpt_tos[0] for r in smtp.received} == {"warm@example.com", "ann@example.com",
                                                       "dee@example.com"}  # fmt: skip
    print(f"the worker's peak grew by {grown:.1f} MiB")
    assert grown < 64, f"the worker grew by {grown:.0f} MiB"  # 120 MB and its copies unmade


@pytest.mark.parametrize("db_kind", MARIADB)
def test_a_worker_rendering_slow_templates_stops_on_sigterm_at_once(
    smtp_app, smtp, client, token, tmp_path
):
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=0.2, SECRET_KEY="test")
    people = [_recipient("ann@example.com")]
    people += [_recipient(f"r{n}@example.com", loops=True) for n in range(30)]
    answer = post(client, token, body(people, text="Hi {{ first }}." + _when("loops", SLOW)))
    assert answer.status_code == 201, answer.get_json()
    mailing = answer.get_json()["id"]

    def failed() -> int:
        return sum(row.status == "failed" for row in _by_address(mailing).values())

    with (tmp_path / "worker.log").open("w") as log, \
         processes.group([*OUTBOX, "worker"], env=env, stderr=log) as worker:  # fmt: skip
        wait_until(lambda: failed() >= 1, DEADLINE)
        started = time.monotonic()
        code = processes.end(worker, timeout=DEADLINE)
        took = time.monotonic() - started
    print(f"stopped {took:.2f} s after SIGTERM")
    assert code == 0 and took < 15, (code, took)  # a render in hand and one ahead: 2 s each
    statuses = [row.status for row in _by_address(mailing).values()]
    assert statuses.count("queued") > 20  # handed back, not rendered through
    row = next(r for r in _by_address(mailing).values() if r.status == "failed")
    assert "longer than 2 seconds" in (row.last_error or "")


BOMBS = {
    "loops": LOOPS,
    "loops behind the unsubscribe token": _when("unsubscribe_token", LOOPS),
    "a 120 MB string": HUGE,
}


@pytest.mark.parametrize("text", BOMBS.values(), ids=BOMBS.keys())
def test_intake_renders_as_the_worker_will_and_refuses_a_bomb_at_once(client, token, text):
    started = time.monotonic()
    answer = post(client, token, body(text="Hi {{ first }}." + text))
    assert time.monotonic() - started < 10
    assert answer.status_code == 422
    (error,) = answer.get_json()["errors"]
    assert error["field"] == "text" and error["index"] == 0
    assert "steps" in error["error"] or "size limit" in error["error"], error
    assert db.session.scalars(select(Message)).all() == []


def test_eight_bombs_over_http_are_each_a_422_and_the_api_answers_on(served, token, tmp_path):  # noqa: F811
    """gunicorn serves with four threads: eight requests that pinned one each took it down."""
    (tmp_path / "bomb.json").write_text(json.dumps(body(text="Hi {{ first }}." + LOOPS)))
    command = ["curl", "-sS", "--max-time", str(DEADLINE), "-o", "/dev/null",
               "-w", "%{http_code}", "-H", f"Authorization: Bearer {token}",
               "-H", "Content-Type: application/json", "--data-binary",
               f"@{tmp_path / 'bomb.json'}", f"{served.url}{MAILINGS}"]  # fmt: skip
    started = time.monotonic()
    curls = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(8)]
    codes = [curl.communicate(timeout=DEADLINE + 10)[0] for curl in curls]
    assert codes == ["422"] * 8
    health = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w",
                             "%{http_code}", f"{served.url}/healthz"],
                            capture_output=True, text=True)  # fmt: skip
    assert health.stdout == "200"
    assert time.monotonic() - started < DEADLINE
