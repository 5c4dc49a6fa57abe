"""The mailing pages: the list, a mailing's progress and buttons, and a recipient's message
page rendered as it is sent."""

from sqlalchemy import select

from outbox.auth import tokens
from outbox.models import AuditEvent
from outbox.models.db import db
from tests.support.mailing_helpers import body, post, rows_of
from tests.support.pages import csrf, parse


def make(client, **fields) -> int:  # type: ignore[no-untyped-def]
    token = tokens.create("shop")
    return int(post(client, token, body(**fields)).get_json()["id"])


def test_the_list_and_the_mailing_page_show_progress_and_the_buttons(app, client, signed_in):
    mailing_id = make(client)
    listed = parse(signed_in.get("/mailings"))
    row = listed.find("tr", id=f"mailing-{mailing_id}")
    assert "Hello {{ first }}" in row.text and "open" in row.text
    page = signed_in.get(f"/mailings/{mailing_id}")
    assert page.status_code == 200 and "HX-Request" in page.headers["Vary"]
    shown = parse(page)
    assert shown.find("td", id="count-queued").text == "2"
    buttons = [b.text for b in shown.find_all("button")]
    assert "Pause" in buttons and "Cancel mailing" in buttons and "Resume" not in buttons
    assert "ann@example.com" in shown.find("table", **{"class": "list stacked recipients"}).text


def test_pause_and_resume_by_htmx_answer_the_live_part(app, client, signed_in):
    mailing_id = make(client)
    token = csrf(signed_in, f"/mailings/{mailing_id}")
    headers = {"HX-Request": "true"}
    paused = signed_in.post(f"/mailings/{mailing_id}/pause", data={"csrf_token": token},
                            headers=headers)  # fmt: skip
    assert paused.status_code == 286  # nothing in flight: the polling stops
    assert parse(paused).find("span", id="mailing-state").text == "paused"
    assert [b.text for b in parse(paused).find_all("button")] == ["Resume", "Cancel mailing"]
    resumed = signed_in.post(f"/mailings/{mailing_id}/resume", data={"csrf_token": token},
                             headers=headers)  # fmt: skip
    assert resumed.status_code == 200  # queued again: it polls
    actions = db.session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions[-2:] == ["mailing_pause", "mailing_resume"]


def test_cancel_asks_first_without_javascript_and_needs_the_csrf_token(app, client, signed_in):
    mailing_id = make(client)
    path = f"/mailings/{mailing_id}/cancel"
    assert signed_in.post(path).status_code == 400  # no CSRF token
    token = csrf(signed_in, f"/mailings/{mailing_id}")
    asked = signed_in.post(path, data={"csrf_token": token})
    assert asked.status_code == 200 and b"Cancel mailing" in asked.data
    assert {r.status for r in rows_of(mailing_id)} == {"queued"}
    done = signed_in.post(path, data={"csrf_token": token, "confirmed": "yes"})
    assert done.status_code == 302
    assert {r.status for r in rows_of(mailing_id)} == {"cancelled"}
    again = signed_in.post(f"/mailings/{mailing_id}/pause", data={"csrf_token": token})
    assert again.status_code == 409


def test_a_recipients_message_page_shows_its_rendered_mail_and_links_its_mailing(
    app, client, signed_in
):
    app.config["UNSUBSCRIBE_URL"] = "https://outbox.example.com"
    mailing_id = make(client, html="<p>Hi {{ first }}</p>")
    ann, _ = rows_of(mailing_id)
    page = parse(signed_in.get(f"/messages/{ann.id}"))
    assert page.find("h1").text.endswith("Hello Ann")
    assert "Dear Ann, your plan is gold." in page.find("pre", **{"class": "body"}).text
    link = page.find("a", href=f"/mailings/{mailing_id}")
    assert link.text == f"mailing #{mailing_id}"
    assert "https://outbox.example.com/unsubscribe/" in page.text  # its List-Unsubscribe
    html = signed_in.get(f"/messages/{ann.id}/body.html")
    assert html.data == b"<p>Hi Ann</p>"
    assert rows_of(mailing_id)[0].text_body is None  # shown, never written


def test_the_pages_need_a_signed_in_account(client):
    assert client.get("/mailings").status_code == 302


def test_the_outbox_list_shows_each_recipients_own_subject(app, client, signed_in):
    make(client)
    listed = parse(signed_in.get("/messages"))
    subjects = [cell.text for cell in listed.find_all("td", **{"class": "subject"})]
    assert subjects == ["Hello Bob", "Hello Ann"]
