"""The compose page: send-after in the staff user's zone, keeping what was typed, the fold."""

import io
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select

from outbox.models import Message
from outbox.models.db import db
from outbox.web.compose import in_utc, zone_named
from tests.support.pages import compose, csrf, parse

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    "typed, zone, stored",
    [
        ("2030-07-01T09:30", "Europe/Berlin", "2030-07-01T07:30:00+00:00"),  # CEST, +2
        ("2030-01-15T09:30:15", "Europe/Berlin", "2030-01-15T08:30:15+00:00"),  # CET, +1
        ("2030-01-15T09:30", "America/New_York", "2030-01-15T14:30:00+00:00"),  # EST, -5
        ("2030-01-15T23:30", "Asia/Kolkata", "2030-01-15T18:00:00+00:00"),  # +5:30
        ("2030-01-15T09:30", "UTC", "2030-01-15T09:30:00+00:00"),
        # The autumn overlap: 02:30 happens twice; the first (CEST, +2) is taken.
        ("2030-10-27T02:30", "Europe/Berlin", "2030-10-27T00:30:00+00:00"),
        ("2030-01-15T09:30+01:00", "America/New_York", "2030-01-15T09:30+01:00"),  # as given
        ("tomorrow", "Europe/Berlin", "tomorrow"),  # for the schema's own error
        ("", "Europe/Berlin", None),
    ],
)
def test_a_typed_time_becomes_the_utc_instant_it_names(typed, zone, stored):
    assert in_utc(typed, zone_named(zone)) == stored


@pytest.mark.parametrize(
    "typed, zone",
    [("2030-03-31T02:30", "Europe/Berlin"), ("2030-03-10T02:00", "America/New_York")],
)
def test_a_time_the_clocks_skip_is_refused_by_name(typed, zone):
    with pytest.raises(ValueError, match=f"does not exist in {zone}: the clocks skip it"):
        in_utc(typed, zone_named(zone))


@pytest.mark.parametrize("name", ["Mars/Olympus", "../../etc/passwd", "Europe/" + "x" * 80, "/"])
def test_an_unknown_zone_is_refused(name):
    with pytest.raises(ValueError, match="is not a time zone this server knows"):
        zone_named(name)


def test_no_zone_is_utc():
    assert zone_named(None).key == zone_named("  ").key == "UTC"


def stored_send_after() -> datetime | None:
    (row,) = db.session.execute(select(Message)).scalars()
    return row.send_after


@pytest.mark.all_databases
def test_a_send_after_typed_in_berlin_is_stored_as_its_utc_instant(signed_in):
    response = compose(signed_in, send_after="2030-07-01T09:30:05", zone="Europe/Berlin")
    assert response.status_code == 302
    assert stored_send_after() == datetime(2030, 7, 1, 7, 30, 5)
    row = db.session.execute(select(Message)).scalar_one()
    assert row.next_attempt_at == datetime(2030, 7, 1, 7, 30, 5)


def test_without_a_zone_the_time_is_utc(signed_in):
    assert compose(signed_in, send_after="2030-07-01T09:30").status_code == 302
    assert stored_send_after() == datetime(2030, 7, 1, 9, 30)


def messages() -> int:
    return db.session.scalar(select(func.count()).select_from(Message)) or 0


def error_of(page, name: str) -> str:  # type: ignore[no-untyped-def]
    return page.find("p", id=f"{name}-error").text.strip()


def test_a_time_in_the_spring_gap_is_an_error_beside_the_field(signed_in):
    response = compose(signed_in, send_after="2030-03-31T02:30", zone="Europe/Berlin")
    assert response.status_code == 422 and messages() == 0
    page = parse(response)
    assert error_of(page, "send_after").startswith("2030-03-31 02:30 does not exist in Europe")
    assert page.find("details", class_="more").get("open") is not None
    assert page.find("strong", **{"data-zone-name": ""}).text == "Europe/Berlin"


def test_an_unknown_zone_is_an_error_only_when_a_time_is_given(signed_in):
    response = compose(signed_in, send_after="2030-01-01T10:00", zone="Mars/Olympus")
    assert response.status_code == 422 and messages() == 0
    assert "'Mars/Olympus' is not a time zone" in error_of(parse(response), "send_after")
    assert compose(signed_in, zone="Mars/Olympus").status_code == 302 and messages() == 1


def test_an_error_keeps_every_field_as_typed_and_names_the_files_to_choose_again(signed_in):
    typed = {"sender": "Shop <shop@example.com>", "to": "Ann <ann@example.com>",
             "cc": "bob@", "bcc": "Hidden <hidden@example.com>",
             "reply_to": "help@example.com", "subject": "Ünïcode & <tags>",
             "text": "Line one\nLine two", "html": "<p>Rich</p>", "priority": "7",
             "send_after": "2030-07-01T09:30:05", "zone": "Europe/Berlin"}  # fmt: skip
    files = [(io.BytesIO(b"one"), "a.pdf", "application/pdf"),
             (io.BytesIO(b"two"), "b c.txt", "text/plain")]  # fmt: skip
    form = {**typed, "attachments": files, "csrf_token": csrf(signed_in)}
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 422 and messages() == 0
    page = parse(response)
    form = page.find("form", class_="compose")
    for name, value in typed.items():
        (control,) = form.find_all(name=name)
        # A newline right after <textarea> is not part of its value (HTML's rule).
        shown = control.text.removeprefix("\r\n") if control.tag == "textarea" else control["value"]
        assert shown == value, name
    assert error_of(page, "cc")
    assert page.find("details", class_="more").get("open") is not None
    again = page.find("p", class_="files-again").text
    assert again == "Files are not kept after an error: choose a.pdf, b c.txt again."


def test_more_options_are_folded_until_one_of_them_has_a_value(signed_in):
    page = parse(signed_in.get("/messages/new"))
    more = page.find("details", class_="more")
    assert more.get("open") is None
    inside = {e["name"] for e in more.find_all("input")}
    assert inside == {"cc", "bcc", "reply_to", "priority", "send_after"}
    # An error elsewhere, with a value folded: open.
    page = parse(compose(signed_in, to="", bcc="x@example.com"))
    assert page.find("details", class_="more").get("open") is not None
    # An error elsewhere, nothing folded has a value: stays folded, no files to name.
    page = parse(compose(signed_in, to=""))
    assert page.find("details", class_="more").get("open") is None
    assert page.find_all("p", class_="files-again") == []


def test_the_required_field_is_marked_for_people_and_machines(signed_in):
    page = parse(signed_in.get("/messages/new"))
    to = page.find("input", name="to")
    assert to.get("required") is not None and to["aria-required"] == "true"
    assert page.find("input", name="zone")["type"] == "hidden"
    assert page.find("input", name="zone")["value"] == "UTC"  # until live.js says otherwise
    assert page.find("strong", **{"data-zone-name": ""}).text == "UTC"
    assert page.find("input", name="send_after")["aria-describedby"] == "send-after-zone"
    optional = [page.find(name=n) for n in ("cc", "subject", "text", "html")]
    assert all(c.get("required") is None for c in optional)
