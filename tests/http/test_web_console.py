"""What the console shows: a finished mailing's buttons, far-off dates, partly delivered rows."""

from datetime import timedelta

from outbox.auth import tokens
from outbox.capabilities.suppression import manage
from outbox.core.status import Status
from outbox.models import utcnow
from tests.support.mailing_helpers import body, post, rows_of
from tests.support.pages import move_to, parse


def test_a_finished_mailing_offers_neither_pause_nor_cancel(client, signed_in):
    mailing_id = int(post(client, tokens.create("shop"), body()).get_json()["id"])
    rows = rows_of(mailing_id)
    move_to(rows[0], Status.SENT)
    waiting = parse(signed_in.get(f"/mailings/{mailing_id}"))
    assert [b.text for b in waiting.find_all("button")][-2:] == ["Pause", "Cancel mailing"]
    for row in rows[1:]:
        move_to(row, Status.FAILED)
    done = parse(signed_in.get(f"/mailings/{mailing_id}"))
    assert done.find_all("div", class_="actions") == []
    assert {b.text for b in done.find_all("button")} == {"Sign out"}


def test_a_message_due_in_weeks_shows_its_date_beside_how_far_off(signed_in, make_message):
    later = (utcnow() + timedelta(days=27)).replace(microsecond=0)
    pk = make_message(send_after=later).id
    date = later.strftime("%Y-%m-%d %H:%M") + " UTC"
    state = parse(signed_in.get(f"/messages/{pk}")).find("section", id="state")
    assert "in 26 d" in state.text or "in 27 d" in state.text
    assert date in state.find("small", class_="on").text
    row = parse(signed_in.get("/messages")).find("tbody", id="rows")
    assert date in row.find("small", class_="on").text
    soon = make_message(send_after=utcnow() + timedelta(hours=2)).id
    assert parse(signed_in.get(f"/messages/{soon}")).find_all("small", class_="on") == []


def test_the_list_marks_a_message_sent_to_some_and_refused_for_others(signed_in, make_message):
    whole = move_to(make_message(to=["a@example.com", "b@example.com"]), Status.SENT)
    manage.add("gone@example.com", "asked us by phone")
    partly = move_to(make_message(to=["a@example.com", "gone@example.com"]), Status.SENT)
    rows = parse(signed_in.get("/messages")).find("tbody", id="rows").find_all("tr")
    status = {int(r.find("input")["value"]): r.find("td", data_label="Status").text
              for r in rows}  # fmt: skip
    assert (status[whole], status[partly]) == ("sent", "partly delivered")
