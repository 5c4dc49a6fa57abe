"""The compose page before it queues to a suppressed address: the form back, kept, with a
warning naming each address and why, and Send anyway."""

import io
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from outbox.capabilities import suppression
from outbox.core.recipients import State
from outbox.models import Message, Suppression
from outbox.models.db import db
from outbox.web.compose import why_suppressed
from tests.support.pages import as_role, compose, parse

ANN, BOB, CAT = "ann@example.com", "bob@example.com", "cat@example.com"
THIRD_OF_NOVEMBER = datetime(2026, 11, 3, 12, 0)


def stored() -> int:
    return db.session.scalar(select(func.count()).select_from(Message)) or 0


def listed(address: str, reason: str, source: str) -> None:
    suppression.add(address, reason, source, now=THIRD_OF_NOVEMBER)
    db.session.commit()


def warning(response):  # type: ignore[no-untyped-def]
    return parse(response).find("div", id="suppressed-warning")


def test_the_first_send_names_each_suppressed_address_and_queues_nothing(signed_in):
    listed(BOB, "550 5.1.1 no such user", "bounce")
    listed(CAT, "asked by phone", "manual")
    answer = compose(signed_in, to=f"{ANN}, Bob <{BOB}>", cc=CAT, subject="Your order 7")
    assert answer.status_code == 200 and stored() == 0
    shown = warning(answer)
    items = [li.text for li in shown.find_all("li")]
    assert items == [f"{BOB}: hard bounce on 3 Nov 2026: 550 5.1.1 no such user",
                     f"{CAT}: added by staff on 3 Nov 2026: asked by phone"]  # fmt: skip
    page = parse(answer)
    assert page.find("input", id="to")["value"] == f"{ANN}, Bob <{BOB}>"
    assert page.find("input", id="subject")["value"] == "Your order 7"
    assert page.find("input", id="cc")["value"] == CAT
    assert page.find("input", id="send_anyway")["value"] == f"{BOB}\n{CAT}"
    buttons = page.find("form", class_="compose").find_all("button")
    assert [b.text for b in buttons] == ["Send anyway"] * 2


def test_send_anyway_queues_it_with_the_suppressed_recipients_refused_as_any(signed_in):
    listed(BOB, "550 5.1.1 no such user", "bounce")
    listed(CAT, "complained", "complaint")
    answer = compose(
        signed_in, to=f"{ANN}, {BOB}", cc=CAT, subject="Hi", send_anyway=f"{BOB}\r\n{CAT}"
    )  # as a browser posts the lines
    assert answer.status_code == 302 and stored() == 1
    message = db.session.scalars(select(Message)).one()
    states = {entry.address: entry.state for entry in message.recipients}
    assert states == {ANN: None, BOB: State.SUPPRESSED, CAT: State.SUPPRESSED}
    assert message.status == "queued"


def test_an_address_not_warned_of_is_warned_of_again(signed_in):
    listed(BOB, "550 5.1.1 no such user", "bounce")
    listed(CAT, "complained", "complaint")
    answer = compose(signed_in, to=f"{BOB}, {CAT}", send_anyway=BOB)
    assert answer.status_code == 200 and stored() == 0
    assert "spam complaint on 3 Nov 2026" in warning(answer).text


def test_no_warning_without_a_suppressed_recipient_for_the_messages_stream(signed_in):
    listed(BOB, "unsubscribed", "unsubscribe")  # keeps broadcast mail only
    answer = compose(signed_in, to=BOB, stream="transactional")
    assert answer.status_code == 302 and stored() == 1
    warned = compose(signed_in, to=BOB, stream="broadcast")
    assert warned.status_code == 200 and "unsubscribed on 3 Nov 2026" in warning(warned).text
    assert compose(signed_in, to=ANN).status_code == 302 and stored() == 2


def test_the_warning_names_the_files_to_choose_again(signed_in):
    listed(BOB, "550 5.1.1 no such user", "bounce")
    answer = compose(signed_in, to=BOB, attachments=(io.BytesIO(b"hi"), "notes.txt", "text/plain"))
    assert answer.status_code == 200
    again = parse(answer).find("p", class_="files-again").text
    assert again == "Files are not kept when the page asks first: choose notes.txt again."


def test_the_day_is_the_staff_members_own():
    entry = Suppression(source="bounce", reason="", created_at=datetime(2026, 11, 3, 2, 0))
    assert why_suppressed(entry, ZoneInfo("America/New_York")) == "hard bounce on 2 Nov 2026"
    assert why_suppressed(entry, ZoneInfo("UTC")) == "hard bounce on 3 Nov 2026"


def test_the_typed_addresses_are_checked_as_an_address_field_is_left(signed_in):
    listed(BOB, "550 5.1.1 no such user", "bounce")
    listed(CAT, "unsubscribed", "unsubscribe")
    query = {"to": f"{ANN}, Bob <{BOB}>", "cc": CAT, "bcc": "", "stream": "transactional",
             "zone": "UTC"}  # fmt: skip
    answer = signed_in.get("/messages/new/suppressed", query_string=query,
                           headers={"HX-Request": "true"})  # fmt: skip
    assert answer.status_code == 200
    items = [li.text for li in parse(answer).find_all("li")]
    assert items == [f"{BOB}: hard bounce on 3 Nov 2026: 550 5.1.1 no such user"]
    broadcast = signed_in.get("/messages/new/suppressed", query_string={**query,
                              "stream": "broadcast"})  # fmt: skip
    assert len(parse(broadcast).find_all("li")) == 2
    for unread in ({"to": "not an address"}, {"to": ANN}, {}):
        assert signed_in.get("/messages/new/suppressed", query_string=unread).data.strip() == b""
    page = parse(signed_in.get("/messages/new"))
    check = page.find("div", id="suppressed-check")
    assert check["hx-get"] == "/messages/new/suppressed" and check["role"] == "status"


def test_the_check_needs_the_compose_role(app, staff):
    viewer = as_role(app, staff, "viewer")
    assert viewer.get("/messages/new/suppressed", query_string={"to": ANN}).status_code == 403
