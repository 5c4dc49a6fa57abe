"""GET /api/messages: newest first, filtered, keyset pages that skip and repeat nothing."""

from datetime import datetime, timedelta

import pytest
from sqlalchemy.dialects import mysql, postgresql

from outbox import queue
from outbox.api import listing
from outbox.auth import tokens
from outbox.core.status import Status
from outbox.queue import wire
from tests.support.api import MESSAGES, auth
from tests.support.app import draft
from tests.support.pages import move_to
from tests.support.rows import fresh

T0 = datetime(2026, 3, 1, 12, 0, 0)


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def stored(app, source: str = "api:shop", now: datetime = T0, **fields: object) -> int:
    values = {"from_addr": "outbox@example.com", "to": ["rcpt@example.com"],
              "subject": "Hello", "text": "Hi", **fields}  # fmt: skip
    message, _ = queue.enqueue(draft(**values), source=source, max_attempts=3, now=now)
    return message.id


def listed(client, token: str, query: str = "") -> tuple[list[list[int]], dict]:
    """The ids of each page, following next links to the end, and the last answer."""
    pages, url = [], f"{MESSAGES}?{query}"
    while url:
        response = client.get(url, headers=auth(token))
        assert response.status_code == 200, response.get_json()
        answer = response.get_json()
        pages.append([m["id"] for m in answer["messages"]])
        url = answer["next"]
    return pages, answer


@pytest.mark.all_databases
def test_pages_across_equal_created_at_skip_and_repeat_nothing(app, client, token):
    ids = [stored(app, subject=f"m{n}") for n in range(7)]  # all created at T0
    pages, last = listed(client, token, "limit=3")
    assert pages == [ids[::-1][0:3], ids[::-1][3:6], ids[::-1][6:]]
    assert last["next"] is None
    first = client.get(f"{MESSAGES}?limit=3", headers=auth(token)).get_json()
    assert first["next"] == f"{MESSAGES}?limit=3&before={ids[4]}"
    shown = first["messages"][0]
    assert (shown["id"], shown["subject"], shown["to"]) == (ids[6], "m6", ["rcpt@example.com"])
    assert "text" not in shown and "html" not in shown and "attempt_log" not in shown


@pytest.mark.all_databases
def test_filters_combine_and_match_recipients_exactly(app, client, token):
    ann = stored(app, to=["Ann <ann@Example.COM>"], now=T0)
    cc = stored(app, to=["x@example.com"], cc=["ann@example.com"], now=T0 + timedelta(hours=1))
    bcc = stored(app, to=["x@example.com"], bcc=["ann@example.com"], now=T0 + timedelta(hours=2))
    stored(app, to=["Ann@example.com"], now=T0 + timedelta(hours=1))  # local part differs
    stored(app, to=['"ann@example.com" <other@example.com>'], now=T0 + timedelta(hours=1))
    stored(app, to=["ann@example.com.evil"], now=T0 + timedelta(hours=1))
    other = stored(app, source="api:other", to=["ann@example.com"], now=T0 + timedelta(hours=1))
    move_to(fresh(cc), Status.CANCELLED)
    pages, _ = listed(client, token, "recipient=ann@EXAMPLE.com")
    assert sum(pages, []) == [other, bcc, cc, ann]
    pages, _ = listed(client, token, "recipient=ann%40example.com&source=api:shop")
    assert sum(pages, []) == [bcc, cc, ann]
    pages, _ = listed(client, token, "recipient=ann@example.com&source=api:shop&status=queued")
    assert sum(pages, []) == [bcc, ann]
    since, until = (T0 + timedelta(hours=1)).isoformat(), (T0 + timedelta(hours=2)).isoformat()
    query = f"recipient=ann@example.com&since={since}Z&until={until}Z"
    assert sum(listed(client, token, query)[0], []) == [other, cc]  # until is not included
    query = f"recipient=ann@example.com&since={since}%2B01:00&source=api:shop"
    assert sum(listed(client, token, query)[0], []) == [bcc, cc, ann]
    query = f"since={since}+01:00&until={until}&status=cancelled"  # an unencoded +
    assert sum(listed(client, token, query)[0], []) == [cc]


@pytest.mark.all_databases
def test_a_status_filter_reads_its_index_to_the_end(app, client, token):
    ids = [stored(app, subject=f"m{n}") for n in range(6)]
    for message_id in ids[::2]:
        move_to(fresh(message_id), Status.SENT)
    pages, _ = listed(client, token, "status=sent&limit=2")
    assert pages == [[ids[4], ids[2]], [ids[0]]]
    shown = client.get(f"{MESSAGES}?status=sent", headers=auth(token)).get_json()["messages"]
    assert {m["status"] for m in shown} == {"sent"}
    assert all(m["next_attempt_at"] is None for m in shown)
    queued = client.get(f"{MESSAGES}?status=queued", headers=auth(token)).get_json()["messages"]
    assert all(m["next_attempt_at"] for m in queued)


def test_a_rare_filter_reads_a_window_at_a_time_and_leaves_a_next_link(
    app, client, token, monkeypatch
):
    monkeypatch.setattr(listing, "WINDOW", 5)
    rare = stored(app, source="api:rare")
    ids = [stored(app) for _ in range(11)]
    pages, last = listed(client, token, "source=api:rare")
    assert pages == [[], [], [rare]] and last["next"] is None
    assert ids[-1] - rare == 11
    first = client.get(f"{MESSAGES}?source=api:rare", headers=auth(token)).get_json()
    assert first["next"] == f"{MESSAGES}?source=api:rare&before={ids[-1] + 1 - 5}"


@pytest.mark.parametrize(
    "query, bad",
    [("status=bogus", {"status"}), ("limit=0", {"limit"}), ("limit=201", {"limit"}),
     ("before=x", {"before"}), ("before=-1", {"before"}), (f"before={2**63}", {"before"}),
     ("since=soon&until=2026-13-01", {"since", "until"}),
     ("recipient=nobody", {"recipient"}), ("recipient=a@example.com,b@example.com", {"recipient"}),
     ("page=2&offset=5", {"page", "offset"}), ("source=a%00b", {"source"}),
     ("recipient=a%0A@example.com", {"recipient"})],
)  # fmt: skip
def test_bad_parameters_are_422_naming_each(client, token, query, bad):
    response = client.get(f"{MESSAGES}?{query}", headers=auth(token))
    assert response.status_code == 422
    answer = response.get_json()
    assert answer["error"] == "the messages were not listed" and set(answer["errors"]) == bad


def test_the_limit_has_a_maximum_and_a_default(app, client, token):
    for _ in range(wire.PAGE_LIMIT + 1):
        stored(app)
    assert len(client.get(MESSAGES, headers=auth(token)).get_json()["messages"]) == wire.PAGE_LIMIT
    answer = client.get(f"{MESSAGES}?limit={wire.MAX_PAGE_LIMIT}", headers=auth(token)).get_json()
    assert len(answer["messages"]) == wire.PAGE_LIMIT + 1 and answer["next"] is None


def test_listing_needs_a_token(client):
    assert client.get(MESSAGES).status_code == 401


def test_mariadb_is_told_to_read_a_status_through_its_index():
    """Left to itself MariaDB scans the primary key backwards for a status of ~1% of rows."""
    stmt = listing._matching(listing.Filters(status="failed"))
    assert "FORCE INDEX (ix_messages_status_id)" in str(stmt.compile(dialect=mysql.dialect()))
    assert "FORCE INDEX" not in str(stmt.compile(dialect=postgresql.dialect()))
    assert "FORCE INDEX" not in str(listing._matching(listing.Filters()).compile(
        dialect=mysql.dialect()))  # fmt: skip
