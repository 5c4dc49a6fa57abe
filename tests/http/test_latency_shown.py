"""Queue-to-250 where staff and apps see it: the message page, the API's detail, the dashboard."""

from datetime import timedelta

import pytest

from outbox.auth import tokens
from outbox.core.status import Status
from outbox.models import utcnow
from tests.support import outcomes
from tests.support.api import MESSAGES, auth
from tests.support.pages import claim, parse
from tests.support.rows import store


def sent_after(make_message, took: timedelta) -> int:  # type: ignore[no-untyped-def]
    """A message the server took `took` after it was queued, recorded as a worker does."""
    queued = utcnow() - timedelta(minutes=5)
    message = make_message(now=queued)
    assert outcomes.sent(claim(message.id, now=queued), queued + took)
    return int(message.id)


@pytest.mark.parametrize(("took", "said"), [
    (timedelta(milliseconds=180), "180 ms"), (timedelta(seconds=4.2), "4.2 s"),
    (timedelta(minutes=3), "3 min"),
])  # fmt: skip
def test_the_message_page_says_how_long_after_it_was_queued_it_was_sent(
    signed_in, make_message, took, said
):
    message_id = sent_after(make_message, took)
    state = parse(signed_in.get(f"/messages/{message_id}")).find("section", id="state")
    assert state.find("small", class_="took").text == f"{said} after it was queued"


def test_a_message_not_sent_yet_says_nothing_of_it(signed_in, make_message):
    message = make_message()
    page = parse(signed_in.get(f"/messages/{message.id}"))
    assert not page.find_all("small", class_="took")


def test_the_api_gives_the_same_figure_in_milliseconds(client, make_message):
    token = tokens.create("shop")
    message_id = sent_after(make_message, timedelta(milliseconds=180))
    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    assert shown["queued_to_sent_ms"] == 180
    waiting = make_message()
    shown = client.get(f"{MESSAGES}/{waiting.id}", headers=auth(token)).get_json()
    assert shown["queued_to_sent_ms"] is None


def test_the_dashboard_shows_p50_and_p95_of_the_last_hour(signed_in, make_message):
    tile = "queued to sent, p50 / p95, last hour"
    assert _tiles(parse(signed_in.get("/")))[tile] == "—"
    for n in range(1, 21):  # 50 ms to 1 s
        at = utcnow() - timedelta(minutes=1)
        message = make_message(now=at - timedelta(milliseconds=50 * n))
        store(message.id, Status.QUEUED, status=Status.SENT.value, sent_at=at, settled_at=at)
    page = parse(signed_in.get("/"))
    assert _tiles(page)[tile] == "500 ms / 950 ms"
    shown = page.find("div", class_="tile-latency").find("span", class_="tile-count")
    assert shown["title"] == "of the 20 messages sent in the last hour"


def _tiles(page):  # type: ignore[no-untyped-def]
    return {t.find(class_="tile-name").text.strip(): t.find(class_="tile-count").text.strip()
            for t in page.find_all(class_="tile")}  # fmt: skip
