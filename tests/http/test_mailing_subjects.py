"""A mailing recipient's subject as it gets it, everywhere a message's subject shows: the
outbox list and its search, the dashboard's failures, the API's list and single read."""

import pytest

from outbox.auth import tokens
from outbox.core.status import Status
from tests.support.mailing_helpers import auth, body, post, rows_of
from tests.support.pages import move_to, parse

READERS = 300


def subjects(page) -> list[str]:  # type: ignore[no-untyped-def]
    return [cell.text for cell in page.find_all("td", **{"class": "subject"})]


def found(client, search: str) -> str:  # type: ignore[no-untyped-def]
    """The list's count of the messages a search finds."""
    page = parse(client.get("/messages", query_string={"q": search}))
    return page.find("p", **{"class": "searched"}).find("strong").text


@pytest.mark.all_databases
def test_a_mailings_recipients_show_and_are_found_by_the_subject_each_gets(
    client, signed_in, make_message
):
    token = tokens.create("shop")
    make_message(subject="An order of its own")
    readers = [{"email": f"reader{n}@example.com", "fields": {"first": f"R{n:03d}", "plan": "p"}}
               for n in range(READERS)]  # fmt: skip
    answer = post(client, token, body(readers, subject="News for {{ first }}"))
    assert answer.status_code == 201, answer.get_json()
    rows = rows_of(answer.get_json()["id"])
    assert [r.subject for r in rows] == [f"News for R{n:03d}" for n in range(READERS)]

    listed = parse(signed_in.get("/messages"))
    assert subjects(listed) == [f"News for R{n:03d}" for n in range(READERS - 1, READERS - 51, -1)]
    assert found(signed_in, "news for") == str(READERS)
    assert found(signed_in, "News for R007") == "1"
    one = parse(signed_in.get("/messages", query_string={"q": "News for R007"}))
    assert subjects(one) == ["News for R007"]

    listing = client.get("/api/messages?limit=200", headers=auth(token)).get_json()["messages"]
    assert [m["subject"] for m in listing] == [f"News for R{n:03d}" for n in range(299, 99, -1)]
    seventh = client.get(f"/api/messages/{rows[7].id}", headers=auth(token)).get_json()
    assert (seventh["subject"], seventh["mailing_id"]) == ("News for R007", rows[7].mailing_id)

    move_to(rows[7], Status.FAILED, "550 5.1.1 no such user")
    failures = parse(signed_in.get("/")).find("table", class_="failures")
    assert "News for R007" in failures.text and "(no subject)" not in failures.text


@pytest.mark.all_databases
def test_a_subject_without_template_syntax_is_each_recipients_as_written(client, signed_in):
    token = tokens.create("shop")
    readers = [{"email": f"r{n}@example.com", "fields": {"first": "x", "plan": "p"}}
               for n in range(3)]  # fmt: skip
    answer = post(client, token, body(readers, subject="November news"))
    mailing_id = answer.get_json()["id"]
    assert {r.subject for r in rows_of(mailing_id)} == {"November news"}
    assert found(signed_in, "november NEWS") == "3"
    appended = post(client, token, {"recipients": readers[:1]},
                    f"/api/mailings/{mailing_id}/recipients")  # fmt: skip
    assert appended.status_code == 201, appended.get_json()
    assert [r.subject for r in rows_of(mailing_id)] == ["November news"] * 4
