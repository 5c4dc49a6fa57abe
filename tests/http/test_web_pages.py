"""Staff pages: compose, the outbox list, one message, its buttons, and the dashboard."""

import io
import json
import re
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import pytest
from sqlalchemy import event, func, select, update
from werkzeug.http import parse_options_header

from outbox import queue
from outbox.core.addresses import parse as parse_addresses
from outbox.core.checks import Upload, check_upload
from outbox.core.deliveries import ACCEPTED, Reply, settle
from outbox.core.status import Outcome, Retry, Status
from outbox.models import Attachment, Message, StatusCount, utcnow
from outbox.models.db import db
from outbox.ops import heartbeats, reports, rollups
from outbox.web import when
from tests.support import outcomes
from tests.support.pages import (
    Element,
    claim,
    csrf,
    facts,
    field_box,
    fresh,
    htmx,
    move_to,
    notice_of,
    parse,
    shown_value,
)

RETRY = Retry(delay=60, backoff=2, max_delay=3600)
FIELDS = ["sender", "to", "cc", "bcc", "reply_to", "subject", "text", "html", "priority",
          "send_after", "attachments"]  # fmt: skip
IN_FLIGHT = [Status.QUEUED, Status.SENDING, Status.DEFERRED]


@pytest.fixture
def make_in(make_message):
    """A message taken to a status through the queue's own moves."""

    def make(status: Status, error: str = "550 5.1.1 no such user", **fields) -> int:  # type: ignore[no-untyped-def]
        return move_to(make_message(**fields), status, error)

    return make


def stored(table=Message) -> int:  # type: ignore[no-untyped-def]
    return db.session.scalar(select(func.count()).select_from(table))


def row_ids(page: Element) -> list[int]:
    """The message ids of the outbox list's rows, top to bottom."""
    rows = page.find("tbody", id="rows")
    return [int(urlsplit(a["href"]).path.rsplit("/", 1)[1]) for a in rows.find_all("a")]


def test_compose_shows_every_field_with_a_visible_label(signed_in):
    page = parse(signed_in.get("/messages/new"))
    form = page.find("form", class_="compose")
    assert form["method"] == "post" and form["enctype"] == "multipart/form-data"
    for name in FIELDS:
        (control,) = [e for e in form.find_all(name=name) if e.tag in ("input", "textarea")]
        label = form.find("label", **{"for": control["id"]})
        assert label.text.strip() and "hidden" not in label.classes
        assert field_box(page, control["id"]).find_all("p", class_="error") == []
    assert form.find("input", name="sender")["value"] == "outbox@example.com"
    assert form.find("input", name="attachments")["type"] == "file"


def test_compose_enqueues_the_message_with_its_attachments(signed_in):
    form = {
        "csrf_token": csrf(signed_in),
        "sender": "Shop <shop@example.com>",
        "to": "Ann <ann@example.com>, bob@example.com",
        "cc": "carl@example.com",
        "bcc": "hidden@example.com",
        "reply_to": "help@example.com",
        "subject": "Your order",
        "text": "Plain",
        "html": "<p>Rich</p>",
        "priority": "5",
        "send_after": "2030-01-02T03:04:05",
        "attachments": [(io.BytesIO(b"first"), "a.txt", "text/plain"),
                        (io.BytesIO(b"%PDF-1.4"), "b.pdf", "application/pdf")],
    }  # fmt: skip
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 302
    (row,) = db.session.execute(select(Message)).scalars()
    assert response.headers["Location"] == f"/messages/{row.id}"
    assert (row.source, row.status, row.max_attempts) == ("web:staff@example.com", "queued", 3)
    assert (str(row.sender), row.listed("to")) == (form["sender"], form["to"])
    assert (row.listed("cc"), row.listed("bcc"), row.reply_to) == (
        form["cc"],
        form["bcc"],
        "help@example.com",
    )
    assert (row.subject, row.text_body, row.html_body, row.priority) == (
        "Your order", "Plain", "<p>Rich</p>", 5
    )  # fmt: skip
    assert row.send_after == row.next_attempt_at == datetime(2030, 1, 2, 3, 4, 5)
    assert queue.read_attachments(row.id) == [
        Upload("a.txt", "text/plain", b"first"), Upload("b.pdf", "application/pdf", b"%PDF-1.4")
    ]  # fmt: skip
    assert (
        parse(signed_in.get(response.headers["Location"])).find("h1").text
        == f"#{row.id} Your order"
    )


def test_compose_with_bad_fields_is_422_with_each_error_beside_its_field(signed_in):
    typed = {"sender": "Shop <shop@example.com>", "to": "nobody", "cc": "bob@",
             "bcc": "fine@example.com", "subject": "Hi\nBcc: victim@example.com",
             "text": "", "html": "", "priority": "high", "send_after": "tomorrow"}  # fmt: skip
    upload = [(io.BytesIO(b"first"), "a.txt", "text/plain")]
    form = {**typed, "csrf_token": csrf(signed_in), "attachments": upload}
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 422
    page = parse(response)
    for name in ("to", "cc", "subject", "text", "priority", "send_after"):
        box = field_box(page, name)
        error = box.find("p", class_="error")
        assert error.text.strip() and error["id"] == f"{name}-error"
        control = box.find(id=name)
        assert (control["aria-invalid"], control["aria-describedby"]) == ("true", f"{name}-error")
    assert "nobody" in field_box(page, "to").find("p", class_="error").text
    for name in ("sender", "bcc", "reply_to", "html"):
        assert field_box(page, name).find_all("p", class_="error") == []
    for name, value in typed.items():
        assert shown_value(page.find(id=name)) == value
    assert stored(Message) == 0 and stored(Attachment) == 0


def tabs(page: Element) -> dict[str, str]:
    """The outbox tabs as name -> count shown."""
    found = {}
    for link in page.find("nav", class_="tabs").find_all("a"):
        found[link.text.split()[0]] = link.find("span", class_="count").text
    return found


@pytest.fixture
def mixed(make_in) -> dict[Status, list[int]]:
    """Nine messages: 2 queued, 1 sending, 1 deferred, 1 sent, 3 failed, 1 cancelled."""
    plan = [Status.FAILED, Status.QUEUED, Status.SENT, Status.FAILED, Status.DEFERRED,
            Status.CANCELLED, Status.FAILED, Status.QUEUED, Status.SENDING]  # fmt: skip
    found: dict[Status, list[int]] = {status: [] for status in Status}
    for n, status in enumerate(plan):
        found[status].append(make_in(status, subject=f"m{n}"))
    return found


@pytest.mark.all_databases
def test_outbox_tabs_show_counts_per_status(signed_in, mixed):
    page = parse(signed_in.get("/messages?status=failed"))
    assert tabs(page) == {"all": "9", "queued": "2", "sending": "1", "deferred": "1",
                          "sent": "1", "failed": "3", "cancelled": "1"}  # fmt: skip
    current = page.find("nav", class_="tabs").find("a", aria_current="page")
    assert current.text.split()[0] == "failed"


@pytest.mark.all_databases
def test_outbox_counts_stop_at_the_cap(signed_in, mixed, monkeypatch):
    monkeypatch.setattr(reports, "COUNT_CAP", 2)
    page = parse(signed_in.get("/messages"))
    assert tabs(page) == {"all": "2+", "queued": "2", "sending": "1", "deferred": "1",
                          "sent": "1", "failed": "2+", "cancelled": "1"}  # fmt: skip


@pytest.mark.all_databases
def test_past_the_cap_the_tabs_show_the_workers_full_count(signed_in, mixed, make_in, monkeypatch):
    monkeypatch.setattr(reports, "COUNT_CAP", 2)
    counted_at = utcnow()
    rollups.refresh_counts(counted_at)
    make_in(Status.FAILED, subject="after the count")
    page = parse(signed_in.get("/messages"))
    # Live up to the cap; past it the full count as it was, marked as not live.
    assert tabs(page) == {"all": "≈9", "queued": "2", "sending": "1", "deferred": "1",
                          "sent": "1", "failed": "≈3", "cancelled": "1"}  # fmt: skip
    failed = page.find("nav", class_="tabs").find_all("span", class_="count")[-2]
    assert failed.attrs["title"] == f"counted in full at {counted_at:%Y-%m-%d %H:%M:%S} UTC"
    # A full count that is not past the cap says less than the live one: the cap it is.
    monkeypatch.setattr(reports, "COUNT_CAP", 1)
    db.session.execute(update(StatusCount).values(messages=1))
    db.session.commit()
    page = parse(signed_in.get("/messages"))
    assert tabs(page)["failed"] == "1+"
    assert tabs(page)["all"] == "≈6"


@pytest.mark.all_databases
def test_dashboard_tiles_show_the_workers_full_count_past_the_cap(signed_in, mixed, monkeypatch):
    monkeypatch.setattr(reports, "COUNT_CAP", 2)
    assert tiles(parse(signed_in.get("/")))["failed"] == "2+"
    rollups.refresh_counts()
    shown = tiles(parse(signed_in.get("/")))
    assert shown == {"queued": "2", "sending": "1", "deferred": "1", "sent": "1", "failed": "≈3",
                     "cancelled": "1", "oldest waiting": shown["oldest waiting"]}  # fmt: skip


@pytest.mark.parametrize("status", list(Status))
def test_status_tab_lists_only_that_status_newest_first(signed_in, mixed, status):
    page = parse(signed_in.get(f"/messages?status={status}"))
    assert row_ids(page) == sorted(mixed[status], reverse=True)


def test_all_tab_lists_every_message_newest_first(signed_in, mixed):
    page = parse(signed_in.get("/messages"))
    everything = [i for ids in mixed.values() for i in ids]
    assert row_ids(page) == sorted(everything, reverse=True)
    subjects = [a.text for a in page.find("tbody", id="rows").find_all("a")]
    assert subjects == [f"m{n}" for n in range(8, -1, -1)]


@pytest.mark.parametrize("status", ["bogus", "ALL", "Failed", ""])
def test_unknown_tab_is_404(signed_in, status):
    assert signed_in.get(f"/messages?status={status}").status_code == 404


@pytest.mark.all_databases
@pytest.mark.parametrize(
    "search, subjects",
    [("ANN", {"Invoice 7", "ANNUAL report"}), ("bob", {"Receipt"}), ("invoice", {"Invoice 7"}),
     ("  Receipt ", {"Receipt"}), ("50%", {"50% off"}), ("a_b", {"a_b"}), ("%", {"50% off"}),
     ("_", {"a_b"}), ("nothing like it", set())],
)  # fmt: skip
def test_search_finds_recipient_or_subject_ignoring_case_and_wildcards(
    signed_in, make_message, search, subjects
):
    made = {}
    for to, subject in [("ann@example.com", "Invoice 7"), ("Bob <bob@example.com>", "Receipt"),
                        ("carl@example.com", "ANNUAL report"), ("d@example.com", "50% off"),
                        ("d@example.com", "500 off"), ("d@example.com", "a_b"),
                        ("d@example.com", "axb")]:  # fmt: skip
        made[make_message(to=[to], subject=subject).id] = subject
    page = parse(signed_in.get("/messages", query_string={"q": search}))
    assert {made[i] for i in row_ids(page)} == subjects
    assert page.find("input", id="q")["value"] == search.strip()


def walk(client, path: str) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The row ids of every page, following the Older links from path."""
    pages = []
    while path:
        page = parse(client.get(path))
        pages.append(row_ids(page))
        older = [a for a in page.find("nav", class_="pager").find_all("a") if a.text == "Older"]
        path = older[0]["href"] if older else None
    return pages


@pytest.mark.all_databases
def test_list_pages_through_every_message_exactly_once(signed_in, make_message, monkeypatch):
    monkeypatch.setattr(reports, "PAGE_SIZE", 3)
    ids = [make_message(subject=f"m{n}").id for n in range(8)]
    first = parse(signed_in.get("/messages"))
    older = first.find("nav", class_="pager").find("a")
    assert older.text == "Older" and older["href"] == f"/messages?status=all&before={ids[5]}"
    make_message(subject="newer, arriving while paging")
    pages = [row_ids(first), *walk(signed_in, older["href"])]
    assert [len(p) for p in pages] == [3, 3, 2]
    assert [i for p in pages for i in p] == sorted(ids, reverse=True)


@pytest.mark.all_databases
def test_filtered_search_pages_keep_their_filter(signed_in, make_in, monkeypatch):
    monkeypatch.setattr(reports, "PAGE_SIZE", 2)
    wanted = []
    for n in range(6):
        wanted.append(make_in(Status.FAILED, subject=f"Invoice {n}"))
        make_in(Status.QUEUED, subject=f"Invoice {n}")
        make_in(Status.FAILED, subject=f"Receipt {n}")
    pages = walk(signed_in, "/messages?status=failed&q=invoice")
    assert [len(p) for p in pages] == [2, 2, 2]
    assert [i for p in pages for i in p] == sorted(wanted, reverse=True)


@pytest.mark.parametrize(
    "statuses, code",
    [([Status.QUEUED], 200), ([Status.SENT, Status.SENDING], 200),
     ([Status.DEFERRED, Status.FAILED], 200),
     ([Status.SENT, Status.FAILED, Status.CANCELLED], 286)],
)  # fmt: skip
def test_htmx_list_answers_its_listing_and_polls_only_while_something_shown_is_in_flight(
    signed_in, make_in, statuses, code
):
    """The fragment is the tabs, rows and pager (<div id="listing">), not the whole page."""
    ids = [make_in(status, to=["ann@example.com"]) for status in statuses]
    make_in(Status.QUEUED, to=["bob@example.com"])  # in flight, but not on this page
    response = signed_in.get("/messages?q=ann", headers={"HX-Request": "true"})
    assert response.status_code == code
    assert "HX-Request" in response.vary
    html = response.get_data(as_text=True).strip()
    assert html.startswith('<div id="listing"') and "<html" not in html and "<h1" not in html
    page = parse(html)
    assert row_ids(page) == sorted(ids, reverse=True)
    assert tabs(page)["all"] == str(len(ids) + 1)
    listing = page.find("div", id="listing")
    if code == 200:
        assert listing["hx-trigger"] == "every 2s"
        assert listing["hx-get"] == "/messages?status=all&q=ann"
    else:
        assert "hx-trigger" not in listing.attrs and "hx-get" not in listing.attrs
    full = signed_in.get("/messages?q=ann")
    assert full.status_code == 200 and "HX-Request" in full.vary
    assert parse(full).find("div", id="listing").attrs == listing.attrs


def test_message_page_shows_every_field_the_body_attachments_and_attempts(signed_in, make_message):
    now = utcnow().replace(microsecond=0)
    message = make_message(
        from_addr="Shop <shop@example.com>", to=["Ann <ann@example.com>", "bob@example.com"],
        cc=["carl@example.com"], bcc=["hidden@example.com"], reply_to="help@example.com",
        subject="Your order", text="Line one\nLine two", headers={"X-Campaign": "spring"},
        priority=5, send_after=now - timedelta(minutes=10), now=now - timedelta(minutes=20),
        attachments=[Upload("a.txt", "text/plain", b"first"),
                     Upload("b.pdf", "application/pdf", b"%PDF")],
    )  # fmt: skip
    first = claim(message.id, "worker-a", now=now - timedelta(minutes=5))
    outcomes.deferred(first, now - timedelta(minutes=5), 451, "451 4.7.1 greylisted", RETRY)
    second = claim(message.id, "worker-b", now=now - timedelta(minutes=1))
    outcomes.failed(second, now - timedelta(minutes=1), 550, "550 5.1.1 no such user")
    page = parse(signed_in.get(f"/messages/{message.id}"))
    head, state = page.find_all("dl", class_="facts")
    row = fresh(message.id)
    assert facts(head) == {
        "From": "Shop <shop@example.com>", "To": "Ann <ann@example.com>, bob@example.com",
        "Cc": "carl@example.com", "Bcc": "hidden@example.com", "Reply-To": "help@example.com",
        "Message-ID": row.message_id, "Priority": "5", "Created": "20 min ago by test",
        "Send after": "10 min ago", "X-Campaign": "spring",
    }  # fmt: skip
    # Every time is relative, with the exact UTC time on hover.
    assert head.find_all("time")[0]["title"] == f"{when(now - timedelta(minutes=20))} UTC"
    assert facts(state) == {"Status": "failed", "Attempts": "2 of 3", "Last try": "1 min ago",
                            "Last error": "550 5.1.1 no such user"}  # fmt: skip
    assert page.find("h1").text == f"#{message.id} Your order"
    assert page.find("pre", class_="body").text == "Line one\nLine two"
    items = page.find("ul", class_="attachments").find_all("li")
    assert [li.find("a").text for li in items] == ["a.txt", "b.pdf"]
    assert items[1].find("small").text == "application/pdf, 4 bytes"
    attempts = page.find("table", class_="attempts").find("tbody").find_all("tr")
    cells = [[td.text.strip() for td in tr.find_all("td")] for tr in attempts]
    assert cells == [
        ["5 min ago", "0.0 s", "worker-a", "", "deferred", "451", "451 4.7.1 greylisted"],
        ["1 min ago", "0.0 s", "worker-b", "", "failed", "550", "550 5.1.1 no such user"],
    ]


@pytest.mark.all_databases
def test_attachment_links_download_the_exact_bytes_as_named_attachments(signed_in, make_message):
    big = bytes(range(256)) * (10 * 1024 + 1)  # 2.5 MiB and a bit: three chunks
    files = [Upload("report.pdf", "application/pdf", b"%PDF-1.4\x00\xff"),
             Upload("Größe 📎.bin", "application/octet-stream", big)]  # fmt: skip
    message = make_message(attachments=files)
    page = parse(signed_in.get(f"/messages/{message.id}"))
    links = page.find("ul", class_="attachments").find_all("a")
    assert [link.get("download") for link in links] == ["", ""]
    for link, upload in zip(links, files, strict=True):
        response = signed_in.get(link["href"])
        assert response.status_code == 200 and response.data == upload.data
        assert response.mimetype == "application/octet-stream"
        assert response.headers["Content-Length"] == str(len(upload.data))
        disposition, options = parse_options_header(response.headers["Content-Disposition"])
        assert (disposition, options["filename"]) == ("attachment", upload.filename)
    other = make_message()
    attachment = links[0]["href"].rsplit("/", 1)[1]
    assert signed_in.get(f"/messages/{other.id}/attachments/{attachment}").status_code == 404


@pytest.mark.all_databases
@pytest.mark.parametrize("path", ["/messages/{id}", "/messages/{id}/body.html",
                                  "/messages/{id}/attachments/1", "/messages/{big}"])  # fmt: skip
def test_unknown_message_is_404(signed_in, path):
    assert signed_in.get(path.format(id=987654, big=2**64)).status_code == 404


@pytest.mark.parametrize("status", list(Status))
def test_state_fragment_polls_while_in_flight_and_answers_286_when_final(
    signed_in, make_in, status
):
    message_id = make_in(status)
    response = signed_in.get(f"/messages/{message_id}", headers={"HX-Request": "true"})
    assert response.status_code == (200 if status in IN_FLIGHT else 286)
    assert "HX-Request" in response.vary
    html = response.get_data(as_text=True).strip()
    assert html.startswith('<section id="state"') and "<h1" not in html
    section = parse(html).find("section", id="state")
    assert facts(section.find("dl"))["Status"] == status
    assert set(buttons(section)) == BUTTONS[status]
    if status in IN_FLIGHT:
        assert section["hx-trigger"] == "every 1s"
        assert section["hx-get"] == f"/messages/{message_id}"
    else:
        assert "hx-trigger" not in section.attrs


def buttons(element: Element) -> dict[str, str]:
    """Button label -> the path its form posts to."""
    return {f.find("button").text: f["action"] for f in element.find_all("form")}


MOVES = [("resend", Status.FAILED, Status.QUEUED), ("resend", Status.CANCELLED, Status.QUEUED),
         ("cancel", Status.QUEUED, Status.CANCELLED), ("cancel", Status.DEFERRED, Status.CANCELLED),
         ("send-now", Status.DEFERRED, Status.DEFERRED)]  # fmt: skip
BUTTONS = {Status.QUEUED: {"Cancel"}, Status.SENDING: set(),
           Status.DEFERRED: {"Send now", "Cancel"}, Status.SENT: {"Send again"},
           Status.FAILED: {"Resend"}, Status.CANCELLED: {"Resend"}}  # fmt: skip
LABELS = {"resend": "Resend", "cancel": "Cancel", "send-now": "Send now",
          "send-again": "Send again"}  # fmt: skip


@pytest.mark.parametrize("via_htmx", [False, True])
@pytest.mark.parametrize("action, start, end", MOVES)
def test_button_moves_the_message(signed_in, make_in, action, start, end, via_htmx):
    message_id = make_in(start)
    page = f"/messages/{message_id}"
    shown = buttons(parse(signed_in.get(page)).find("section", id="state"))
    assert set(shown) == BUTTONS[start]
    assert shown[LABELS[action]] == f"{page}/{action}"
    was = fresh(message_id)
    before, attempts, due = utcnow(), was.attempts, was.next_attempt_at
    yes = {"confirmed": "yes"}  # htmx sends it after its hx-confirm (see test_confirmations)
    if via_htmx:
        response = signed_in.post(shown[LABELS[action]], headers=htmx(signed_in, page), data=yes)
        assert response.status_code == 200 and "HX-Request" in response.vary
        state = parse(response).find("section", id="state")
        assert facts(state.find("dl"))["Status"] == end
        assert set(buttons(state)) == BUTTONS[end]
    else:
        response = signed_in.post(shown[LABELS[action]],
                                  data={"csrf_token": csrf(signed_in, page), **yes})  # fmt: skip
        assert response.status_code == 302 and response.headers["Location"] == page
    row = fresh(message_id)
    assert (row.status, row.attempts) == (end, attempts)
    if action == "send-now":
        assert due > utcnow() and before <= row.next_attempt_at <= utcnow()
    if action == "resend":
        assert row.max_attempts == attempts + 3 and row.next_attempt_at <= utcnow()


@pytest.mark.parametrize("via_htmx", [False, True])
def test_send_now_makes_a_scheduled_message_due_but_leaves_a_paused_row_held(
    signed_in, make_message, via_htmx
):
    later = utcnow() + timedelta(days=27)
    scheduled = make_message(send_after=later)
    page = f"/messages/{scheduled.id}"
    shown = buttons(parse(signed_in.get(page)).find("section", id="state"))
    assert set(shown) == {"Send now", "Cancel"}
    before = utcnow()
    if via_htmx:
        response = signed_in.post(shown["Send now"], headers=htmx(signed_in, page))
        state = parse(response).find("section", id="state")
        assert set(buttons(state)) == {"Cancel"}  # due now: nothing left to bring forward
    else:
        response = signed_in.post(shown["Send now"], data={"csrf_token": csrf(signed_in, page)})
        assert response.status_code == 302
    row = fresh(scheduled.id)
    assert row.status == "queued" and before <= row.next_attempt_at <= utcnow()
    # A row its mailing's pause holds waits for the mailing's resume, not for this button.
    held = make_message(send_after=later)
    db.session.execute(update(Message).where(Message.id == held.id)
                       .values(next_attempt_at=queue.PAUSED_UNTIL))  # fmt: skip
    db.session.commit()
    with pytest.raises(queue.MoveRefused, match="mailing is paused"):
        queue.send_now(held.id)
    assert fresh(held.id).next_attempt_at == queue.PAUSED_UNTIL


@pytest.mark.parametrize("via_htmx", [False, True])
def test_send_again_queues_a_copy_of_a_sent_message(signed_in, make_message, via_htmx):
    files = [Upload("a.txt", "text/plain", b"first"), Upload("b.bin", "application/x-b", b"\0\1")]
    message = make_message(cc=["c@example.com"], reply_to="r@example.com", html="<p>Hi</p>",
                           headers={"X-Tag": "t"}, priority=3, attachments=files)  # fmt: skip
    move_to(message, Status.SENT)
    path = f"/messages/{message.id}/send-again"
    if via_htmx:
        response = signed_in.post(path, headers=htmx(signed_in), data={"confirmed": "yes"})
        assert response.status_code == 204
        target = response.headers["HX-Redirect"]
    else:
        response = signed_in.post(path, data={"csrf_token": csrf(signed_in), "confirmed": "yes"})
        assert response.status_code == 302
        target = response.headers["Location"]
    old = fresh(message.id)
    (new,) = db.session.execute(select(Message).where(Message.id != message.id)).scalars()
    assert target == f"/messages/{new.id}" and signed_in.get(target).status_code == 200
    assert (new.status, new.source, new.attempts) == ("queued", "web:staff@example.com", 0)
    assert new.message_id != old.message_id and old.status == "sent"
    content = ("from_addr", "from_name", "recipients", "reply_to", "reply_to_name", "subject",
               "text_body", "html_body", "headers", "priority")  # fmt: skip
    assert [getattr(new, c) for c in content] == [getattr(old, c) for c in content]
    assert queue.read_attachments(new.id) == queue.read_attachments(old.id) != []
    # Each names the other: the copy its original, the original its copies.
    assert (new.resent_from, old.resent_from) == (old.id, None)
    copy = parse(signed_in.get(target)).find("section", id="state")
    assert facts(copy.find("dl", class_="facts"))["Sent again from"] == f"#{old.id}"
    assert copy.find("a", href=f"/messages/{old.id}").text == f"#{old.id}"
    original = parse(signed_in.get(f"/messages/{old.id}")).find("section", id="state")
    assert facts(original.find("dl", class_="facts"))["Sent again as"] == f"#{new.id}"


REFUSED = [("resend", s) for s in (Status.QUEUED, Status.SENDING, Status.DEFERRED, Status.SENT)]
REFUSED += [("cancel", s) for s in (Status.SENDING, Status.SENT, Status.FAILED, Status.CANCELLED)]
REFUSED += [("send-now", s) for s in Status if s is not Status.DEFERRED]
REFUSED += [("send-again", s) for s in Status if s is not Status.SENT]


@pytest.mark.parametrize("via_htmx", [False, True])
@pytest.mark.parametrize("action, status", REFUSED)
def test_button_for_a_move_not_allowed_is_409_and_changes_nothing(
    signed_in, make_in, action, status, via_htmx
):
    message_id = make_in(status)
    before = fresh(message_id)
    state = (before.status, before.attempts, before.max_attempts, before.next_attempt_at)
    path = f"/messages/{message_id}/{action}"
    if via_htmx:
        response = signed_in.post(path, headers=htmx(signed_in))
    else:
        response = signed_in.post(path, data={"csrf_token": csrf(signed_in)})
    assert response.status_code == 409
    row = fresh(message_id)
    assert (row.status, row.attempts, row.max_attempts, row.next_attempt_at) == state
    assert stored(Message) == 1


@pytest.mark.parametrize("action", LABELS)
def test_button_for_an_unknown_message_is_404(signed_in, action):
    response = signed_in.post(f"/messages/987654/{action}", data={"csrf_token": csrf(signed_in)})
    assert response.status_code == 404 and stored(Message) == 0


def test_dashboard_resend_answers_the_failure_row_and_its_tiles(signed_in, make_in):
    message_id = make_in(Status.FAILED, subject="Lost")
    dashboard = parse(signed_in.get("/"))
    assert tiles(dashboard)["failed"] == "1" and tiles(dashboard)["queued"] == "0"
    row = dashboard.find("tr", id=f"failure-{message_id}")
    form = row.find("form")
    assert form["hx-post"] == form["action"] == f"/failures/{message_id}/resend"
    assert form["hx-target"] == f"#failure-{message_id}"
    response = signed_in.post(form["hx-post"], headers=htmx(signed_in))
    assert response.status_code == 200 and "HX-Request" in response.vary
    html = response.get_data(as_text=True).strip()
    assert html.startswith(f'<tr id="failure-{message_id}">')
    answer = parse(html)
    row = answer.find("tr", id=f"failure-{message_id}")
    assert row.find("span", class_="status").text == "queued" and row.find_all("form") == []
    assert fresh(message_id).status == Status.QUEUED
    # The tiles come along out of band: the failed count drops, the queued one rises.
    assert answer.find("section", id="tiles")["hx-swap-oob"] == "true"
    assert tiles(answer)["failed"] == "0" and tiles(answer)["queued"] == "1"
    # Once more is refused: it is not failed any longer.
    again = signed_in.post(form["hx-post"], headers=htmx(signed_in))
    assert again.status_code == 409 and fresh(message_id).status == Status.QUEUED


def test_dashboard_polls_for_its_live_part_alone(signed_in, make_in):
    message_id = make_in(Status.FAILED, subject="Lost")
    page = parse(signed_in.get("/"))
    live = page.find("div", id="live")
    assert live["hx-get"] == "/" and live["hx-trigger"] == "every 5s, outbox:visible"
    assert "data-live" in live.attrs and live["hx-swap"] == "innerHTML"
    response = signed_in.get("/", headers=htmx(signed_in))
    assert response.status_code == 200 and "HX-Request" in response.vary
    part = parse(response)
    assert part.find_all("html") == [] and part.find_all("h1") == []  # no page around it
    assert tiles(part)["failed"] == "1"
    assert part.find("tr", id=f"failure-{message_id}").find("button").text == "Resend"
    # The resend-all form is kept as it is across refreshes: a ticked box stays ticked.
    assert part.find("form", id="resend-all")["hx-preserve"] == "true"
    assert [t.text for t in part.find_all("h2")] == [
        "Guardrails: rates against thresholds",  # the failure's refusal is counted
        "Sent and failed per hour, last 24 hours (UTC)",
        "Per stream, last 24 hours (UTC)",
        "Failures, last 24 hours",
        "Latest failures",
        "Workers",
        "Sending",
    ]  # fmt: skip  (the queue first; pausing, rare, last)


def test_dashboard_resend_without_javascript_goes_back_to_the_dashboard(signed_in, make_in):
    message_id = make_in(Status.FAILED)
    response = signed_in.post(f"/failures/{message_id}/resend",
                              data={"csrf_token": csrf(signed_in, "/")})  # fmt: skip
    assert (response.status_code, response.headers["Location"]) == (302, "/")
    assert fresh(message_id).status == Status.QUEUED
    assert signed_in.post("/failures/987654/resend", headers=htmx(signed_in)).status_code == 404
    assert signed_in.post(f"/failures/{message_id}/resend").status_code == 400  # no CSRF token


def tiles(page: Element) -> dict[str, str]:
    """The tiles of counts and ages (queue-to-250's: tests/http/test_latency_shown.py)."""
    found = {}
    for tile in page.find_all(class_="tile"):
        if "tile-latency" in tile.classes:
            continue
        found[tile.find(class_="tile-name").text.strip()] = tile.find(class_="tile-count").text
    return found


@pytest.mark.all_databases
def test_dashboard_counts_messages_per_status_and_the_oldest_waiting_age(signed_in, make_in):
    now = utcnow()
    make_in(Status.QUEUED, now=now - timedelta(hours=3, minutes=5, seconds=10))
    # Made 9 days ago, due 2 h ago: it has waited since it became due, not since made.
    make_in(
        Status.QUEUED, now=now - timedelta(days=9), send_after=now - timedelta(hours=4, minutes=2)
    )
    make_in(Status.QUEUED, now=now - timedelta(days=20), send_after=now + timedelta(hours=1))
    make_in(Status.DEFERRED, now=now - timedelta(days=2, hours=4, minutes=1))  # retry ahead
    make_in(Status.FAILED, now=now - timedelta(days=9))  # not waiting
    for status in (Status.SENT, Status.SENT, Status.CANCELLED, Status.SENDING):
        make_in(status)
    page = parse(signed_in.get("/"))
    assert tiles(page) == {"queued": "3", "sending": "1", "deferred": "1", "sent": "2",
                           "failed": "1", "cancelled": "1", "oldest waiting": "4h 2m"}  # fmt: skip
    assert page.find("a", class_="tile-queued")["href"] == "/messages?status=queued"
    due = page.find("div", class_="tile-oldest").find("time")
    assert due["title"] == f"due since {when(now - timedelta(hours=4, minutes=2))} UTC"


@pytest.mark.all_databases
def test_oldest_waiting_is_the_earliest_due_time_that_has_come(app, make_in, make_message):
    now = utcnow()
    assert reports.oldest_waiting(now) is None
    make_message(now=now - timedelta(days=3), send_after=now + timedelta(days=1))
    assert reports.oldest_waiting(now) is None  # made long ago, but not due yet
    deferred = make_in(Status.DEFERRED)  # due again after the retry delay
    retry_at = fresh(deferred).next_attempt_at
    assert reports.oldest_waiting(now) is None
    assert reports.oldest_waiting(retry_at + timedelta(seconds=1)) == retry_at
    make_message(now=now - timedelta(hours=1), priority=-5)
    make_message(now=now - timedelta(minutes=30), priority=9)
    assert reports.oldest_waiting(now) == now - timedelta(hours=1)  # whatever its priority
    queue.send_now(deferred, now=now - timedelta(hours=2))
    assert reports.oldest_waiting(now) == now - timedelta(hours=2)


def test_dashboard_without_waiting_messages_shows_no_age(signed_in, make_in):
    make_in(Status.SENT)
    assert tiles(parse(signed_in.get("/")))["oldest waiting"] == "—"


@pytest.mark.all_databases
def test_dashboard_chart_has_24_hours_of_sent_and_failed_attempts(signed_in, make_message):
    now = utcnow()
    for hours_ago, outcome in [(2, "sent"), (2, "sent"), (5, "failed"), (1, "deferred"),
                               (25, "sent"), (0, "failed")]:  # fmt: skip
        moment = now - timedelta(hours=hours_ago)
        message = make_message(now=moment - timedelta(minutes=1))
        held = claim(message.id, now=moment)
        if outcome == "sent":
            outcomes.sent(held, moment)
        elif outcome == "failed":
            outcomes.failed(held, moment, 550, "550 no")
        else:
            outcomes.deferred(held, moment, 451, "451 later", RETRY)
    svg = parse(signed_in.get("/")).find("svg", class_="chart")
    groups = svg.find_all("g")
    assert len(groups) == 24
    shown = {}
    for group in groups:
        hour, sent, failed = re.fullmatch(r"(\d\d):00: (\d+) sent, (\d+) failed",
                                          group.find("title").text).groups()  # fmt: skip
        shown[hour] = (int(sent), int(failed))
        assert len(group.find_all("rect")) == 2
    two, five, this = ((now - timedelta(hours=h)).strftime("%H") for h in (2, 5, 0))
    assert shown[two] == (2, 0) and shown[five] == (0, 1) and shown[this] == (0, 1)
    assert sum(s for s, _ in shown.values()) == 2 and sum(f for _, f in shown.values()) == 2
    peak_bar = [g for g in groups if g.find("title").text.startswith(f"{two}:00")]
    assert float(peak_bar[0].find("rect", class_="bar-sent")["height"]) == 120


def test_dashboard_lists_latest_failures_each_with_a_resend_button(signed_in, make_in):
    failed = [make_in(Status.FAILED, subject=f"Lost {n}", error=f"550 no {n}") for n in range(3)]
    make_in(Status.CANCELLED, subject="Not a failure")
    page = parse(signed_in.get("/"))
    table = page.find("table", class_="failures")
    rows = table.find("tbody").find_all("tr")
    assert [tr["id"] for tr in rows] == [f"failure-{i}" for i in reversed(failed)]
    for n, tr in zip(range(2, -1, -1), rows, strict=True):
        assert buttons(tr) == {"Resend": f"/failures/{failed[n]}/resend"}
        assert f"Lost {n}" in tr.text and f"550 no {n}" in tr.text
    assert "Not a failure" not in page.text


def test_resend_all_failed_needs_the_box_ticked(signed_in, make_in):
    failed = [make_in(Status.FAILED) for _ in range(2)]
    cancelled = make_in(Status.CANCELLED)
    response = signed_in.post("/messages/resend-failed", data={"csrf_token": csrf(signed_in, "/")})
    assert response.status_code == 302
    page = parse(signed_in.get(response.headers["Location"]))
    form = page.find("form", class_="confirm")
    assert "Tick the box to confirm." in form.find("p", class_="error").text
    assert [fresh(i).status for i in failed] == ["failed", "failed"]
    box = form.find("input", type="checkbox")
    data = {"csrf_token": csrf(signed_in, "/"), box["name"]: "y"}
    response = signed_in.post(form["action"], data=data)
    assert response.status_code == 302
    page = parse(signed_in.get(response.headers["Location"]))
    assert page.find(id="notice").text == "2 failed messages queued again."
    assert [fresh(i).status for i in failed] == ["queued", "queued"]
    assert fresh(cancelled).status == "cancelled"


@pytest.mark.all_databases
@pytest.mark.parametrize(
    "poll, seconds_ago, warned",
    [(20.0, 35, False), (20.0, 45, True), (60.0, 100, False), (60.0, 130, True),
     (20.0, None, True)],
)  # fmt: skip
def test_dashboard_warns_when_no_worker_beat_within_two_poll_intervals(
    app, signed_in, poll, seconds_ago, warned
):
    app.config["POLL_INTERVAL"] = poll
    now = utcnow()
    heartbeats.beat("old-worker", now - timedelta(days=2), 3, now=now - timedelta(hours=2))
    if seconds_ago is not None:
        started = now - timedelta(hours=1)
        heartbeats.beat("worker-a", started, 5, now=now - timedelta(seconds=seconds_ago + 60))
        heartbeats.beat("worker-a", started, 2, now=now - timedelta(seconds=seconds_ago))
    page = parse(signed_in.get("/"))
    alerts = [a.text for a in page.find_all(role="alert")]
    if warned:
        assert alerts == [f"No worker has been seen in the last {int(2 * poll)} seconds: "
                          "queued mail is not being sent."]  # fmt: skip
    else:
        assert alerts == []
    workers = page.find_all("table")[-1].find("tbody").find_all("tr")
    cells = [[td.text for td in tr.find_all("td")] for tr in workers]
    assert [c[0] for c in cells] == (
        ["old-worker"] if seconds_ago is None else ["worker-a", "old-worker"]
    )
    assert workers[-1].classes == ["quiet"]
    if seconds_ago is not None:
        assert cells[0][4] == "7" and (workers[0].classes == ["quiet"]) == warned


SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"


def test_markup_in_data_shows_as_text_on_every_page(signed_in, make_message):
    message = make_message(
        to=parse_addresses([f'"{IMG}" <ann@example.com>']), subject=f"{SCRIPT} order",
        text=f"Body {SCRIPT} {IMG}", html=f"<p>{IMG}</p>",
        attachments=[check_upload(f"{IMG}.txt", "text/plain", b"x")],
    )  # fmt: skip
    move_to(message, Status.FAILED, error=f"550 {SCRIPT} {IMG}")
    for path in ("/messages", f"/messages/{message.id}", "/"):
        response = signed_in.get(path)
        html = response.get_data(as_text=True)
        page = parse(html)
        scripts = page.find_all("script")  # the app's own files only, none inline
        assert "/static/htmx.min.js" in [s.get("src") for s in scripts]
        assert all((s.get("src") or "").startswith("/static/") and not s.text for s in scripts)
        assert page.find_all("img") == []
        assert not any(name.startswith("on") for e in page.iter() for name in e.attrs)
        # The list and the dashboard's failures show addresses, the name only on hover.
        named = f'"{IMG}" <ann@example.com>'
        if path in ("/messages", "/"):
            assert any(e.get("title") == named for e in page.iter())
        for text in (f"{SCRIPT} order", f"550 {SCRIPT} {IMG}"):
            assert text in page.text, (path, text)
        assert f'"{IMG}"' in page.text or path in ("/messages", "/")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
    page = parse(signed_in.get(f"/messages/{message.id}"))
    assert page.find("pre", class_="body").text == f"Body {SCRIPT} {IMG}"
    assert page.find("ul", class_="attachments").find("a").text == f"{IMG}.txt"
    assert page.find("title").text.startswith(f"#{message.id} {SCRIPT} order")


def test_compose_with_no_recipient_names_every_other_bad_field_too(signed_in):
    form = {"to": "", "cc": "bob@", "priority": "high", "text": "hi",
            "csrf_token": csrf(signed_in)}  # fmt: skip
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 422
    page = parse(response)
    for name in ("to", "cc", "priority"):
        assert field_box(page, name).find("p", class_="error").text.strip()
    assert stored(Message) == 0


@pytest.mark.all_databases
def test_a_search_reads_a_window_of_ids_and_pages_on_to_older_ones(
    signed_in, make_message, monkeypatch
):
    monkeypatch.setattr(reports, "SEARCH_WINDOW", 5)
    ids = [make_message(subject=f"{'needle' if n in (1, 8) else 'hay'} {n}").id for n in range(10)]

    def found(page) -> list[str]:  # type: ignore[no-untyped-def]
        return [a.text for a in page.find("tbody", id="rows").find_all("a")]

    first = parse(signed_in.get("/messages?q=needle"))
    assert found(first) == ["needle 8"]
    (older,) = [
        a["href"] for a in first.find("nav", class_="pager").find_all("a") if a.text == "Older"
    ]
    assert f"before={ids[5]}" in older
    second = parse(signed_in.get(older))
    assert found(second) == ["needle 1"]


def test_dashboard_warnings_keep_their_id_while_they_last_so_a_refresh_leaves_them(app, signed_in):
    app.config["POLL_INTERVAL"] = 60.0
    started = utcnow()

    def warnings() -> list[tuple[str, str]]:
        part = parse(signed_in.get("/", headers=htmx(signed_in)))
        found = part.find_all(role="alert")
        assert all(p["hx-preserve"] == "true" for p in found)
        return [(p["id"], p.text) for p in found]

    assert warnings() == [("no-worker", "No worker has been seen in the last 120 seconds: "
                                        "queued mail is not being sent.")]  # fmt: skip
    heartbeats.fault("w1", started, "530 5.7.0 Authentication required")
    ((first, text),) = warnings()
    assert first.startswith("fault-") and "530 5.7.0 Authentication required" in text
    heartbeats.fault("w1", started, "530 5.7.0 Authentication required")
    assert [i for i, _ in warnings()] == [first]  # the same fault: the same element
    heartbeats.fault("w1", started, "535 5.7.8 Bad credentials")  # another error, same since
    ((second, text),) = warnings()
    assert second != first and "535 5.7.8 Bad credentials" in text
    heartbeats.fault("w1", started, None)
    assert warnings() == []


# --- error pages, confirmations, bulk actions, search counts, the message page ---


def test_a_page_that_is_not_there_is_a_styled_404_with_the_navigation(signed_in):
    for path, code in (("/no-such-page", 404), ("/messages/987654", 404),
                       ("/messages/1/cancel", 405)):  # fmt: skip
        response = signed_in.get(path)
        assert response.status_code == code and response.mimetype == "text/html"
        page = parse(response)
        assert page.find("p", class_="error-code").text == str(code)
        assert page.find("form", class_="sign-out").find("span").text == "staff@example.com"
        assert "Content-Security-Policy" in response.headers


def test_the_api_keeps_its_json_errors(signed_in):
    for path, method, code in (("/api/no-such", "get", 404), ("/api/messages", "delete", 405)):
        response = getattr(signed_in, method)(path)
        assert (response.status_code, response.mimetype) == (code, "application/json")
        assert "error" in response.get_json()


def test_a_500_page_renders_without_the_database(app, signed_in, monkeypatch):
    app.config["PROPAGATE_EXCEPTIONS"] = False
    statements: list[str] = []

    def record(conn, cursor, statement, *rest):  # type: ignore[no-untyped-def]
        statements.append(statement)

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        # From here on the database is "down": any statement is one too many.
        event.listen(db.engine, "before_cursor_execute", record)
        raise RuntimeError("boom")

    monkeypatch.setattr(reports, "page", broken)
    try:
        response = signed_in.get("/messages")
    finally:
        if event.contains(db.engine, "before_cursor_execute", record):
            event.remove(db.engine, "before_cursor_execute", record)
    assert response.status_code == 500
    page = parse(response)
    assert page.find("h1").text == "Something went wrong" and "boom" not in page.text
    assert page.find("form", class_="sign-out")  # the user loaded before the error
    assert statements == []


def test_cancel_and_send_again_ask_first_without_javascript(signed_in, make_in):
    queued, sent = make_in(Status.QUEUED), make_in(Status.SENT)
    for pk, action in ((queued, "cancel"), (sent, "send-again")):
        path = f"/messages/{pk}/{action}"
        token = csrf(signed_in, f"/messages/{pk}")
        asked = signed_in.post(path, data={"csrf_token": token})
        assert asked.status_code == 200 and stored(Message) == 2
        form = parse(asked).find("form", class_="confirm")
        assert form["action"] == path
        assert form.find("input", name="confirmed")["value"] == "yes"
        assert form.find("a").get("href") == f"/messages/{pk}"
        data = {i["name"]: i["value"] for i in form.find_all("input")}
        assert signed_in.post(path, data=data).status_code == 302
    assert fresh(queued).status == "cancelled" and stored(Message) == 3
    # htmx asks in the browser, and says yes in the request (hx-vals) only after that.
    state = parse(signed_in.get(f"/messages/{sent}")).find("section", id="state")
    (button,) = [f for f in state.find_all("form") if f.find("button").text == "Send again"]
    assert button["hx-confirm"].startswith(f"Send message #{sent} again?")
    assert json.loads(button["hx-vals"]) == {"confirmed": "yes"}


def bulk_post(client, ids, move, confirmed=True, htmx_headers=None, query=""):  # type: ignore[no-untyped-def]
    data: dict[str, object] = {"ids": [str(i) for i in ids], "move": move}
    if confirmed:
        data["confirmed"] = "yes"
    if htmx_headers is None:
        data["csrf_token"] = csrf(client, "/messages")
    return client.post(f"/messages/bulk{query}", data=data, headers=htmx_headers or {})


@pytest.mark.all_databases
def test_bulk_resend_moves_only_what_each_status_allows_and_says_how_many(signed_in, mixed):
    chosen = [*mixed[Status.FAILED][:2], mixed[Status.CANCELLED][0], mixed[Status.SENT][0],
              mixed[Status.QUEUED][0]]  # fmt: skip
    before = {pk: fresh(pk).status for pk in chosen}
    asked = bulk_post(signed_in, chosen, "resend", confirmed=False)
    assert asked.status_code == 200 and {pk: fresh(pk).status for pk in chosen} == before
    page = parse(asked)
    assert page.find("h1").text == "Resend 3 messages?"
    form = page.find("form", class_="confirm")
    assert sorted(int(i["value"]) for i in form.find_all("input", name="ids")) == sorted(chosen)
    done = bulk_post(signed_in, chosen, "resend", query="?status=failed")
    assert done.status_code == 302 and done.headers["Location"] == "/messages?status=failed"
    after = parse(signed_in.get(done.headers["Location"]))
    assert after.find(id="notice").text == (
        "3 messages queued again. 2 left as they were: not failed or cancelled."
    )
    assert [fresh(pk).status for pk in chosen] == ["queued"] * 3 + ["sent", "queued"]


def test_bulk_cancel_over_htmx_answers_the_listing_with_its_tally(signed_in, mixed):
    chosen = [*mixed[Status.QUEUED], *mixed[Status.DEFERRED], *mixed[Status.FAILED]]
    headers = htmx(signed_in, "/messages")
    response = bulk_post(signed_in, chosen, "cancel", htmx_headers=headers, query="?status=all")
    assert response.status_code == 200
    assert parse(response).find("div", id="listing")
    assert notice_of(response) == {
        "text": "3 messages cancelled. 3 left as they were: not queued or deferred.",
        "refused": False,
    }
    assert {fresh(pk).status for pk in chosen[:3]} == {"cancelled"}
    assert {fresh(pk).status for pk in chosen[3:]} == {"failed"}


@pytest.mark.parametrize("data", [
    {"ids": ["1"], "move": "delete"}, {"ids": ["x"], "move": "cancel"},
    {"ids": ["0"], "move": "cancel"}, {"ids": [str(2**63)], "move": "cancel"},
    {"ids": [str(n) for n in range(1, 502)], "move": "cancel"},
])  # fmt: skip
def test_bulk_refuses_what_is_not_a_move_of_message_ids(signed_in, make_in, data):
    pk = make_in(Status.QUEUED)
    sent = {**data, "confirmed": "yes", "csrf_token": csrf(signed_in, "/messages")}
    response = signed_in.post("/messages/bulk", data=sent)
    assert response.status_code == 400 and fresh(pk).status == "queued"


def test_every_row_can_be_chosen_and_links_to_its_message_with_the_way_back(signed_in, mixed):
    page = parse(signed_in.get("/messages?status=failed&q=m"))
    rows = page.find("tbody", id="rows").find_all("tr")
    assert len(rows) == 3
    for tr, pk in zip(rows, sorted(mixed[Status.FAILED], reverse=True), strict=True):
        assert tr.find("input", name="ids")["value"] == str(pk)
        assert tr.find("td", class_="id").text == f"#{pk}"
        assert tr.find("td", class_="source").text.strip() == "test"
        link = tr.find("a", class_="row-link")
        shown = parse(signed_in.get(link["href"]))
        assert shown.find("p", class_="back").find("a")["href"] == "/messages?status=failed&q=m"


@pytest.mark.parametrize("back", ["//evil.example/x", "https://evil.example/", "/\\evil.example",
                                  "javascript:alert(1)", "/messages\n", "", "x"])  # fmt: skip
def test_the_way_back_is_only_ever_a_local_path(signed_in, make_in, back):
    pk = make_in(Status.SENT)
    page = parse(signed_in.get(f"/messages/{pk}", query_string={"back": back}))
    assert page.find("p", class_="back").find("a")["href"] == "/messages"


@pytest.mark.all_databases
def test_a_search_says_how_many_it_found_for_what_and_how_to_clear_it(
    signed_in, make_message, monkeypatch
):
    for n in range(4):
        make_message(subject=f"invoice {n}")
    make_message(subject="receipt")
    page = parse(signed_in.get("/messages?q=INVOICE"))
    said = page.find("p", class_="searched")
    assert " ".join(said.text.split()) == "4 messages match “INVOICE”. Clear search"
    assert said.find("a")["href"] == "/messages?status=all"
    monkeypatch.setattr(reports, "COUNT_CAP", 3)
    said = parse(signed_in.get("/messages?q=invoice")).find("p", class_="searched")
    assert said.find("strong").text == "3+"
    assert parse(signed_in.get("/messages")).find_all("p", class_="searched") == []


def partly_sent(message_id: int, now: datetime) -> None:
    """An attempt that one recipient took and the other refused for good."""
    held = claim(message_id, now=now)
    entries = fresh(message_id).recipients
    replies = {"here@example.com": ACCEPTED,
               "gone@example.com": Reply(Outcome.FAILED, 550, "5.1.1 no such user")}  # fmt: skip
    settled = settle(entries, replies, 1, held.max_attempts)
    done = queue.Finished(held, settled.outcome, now, settled.code, settled.error,
                          settled.recipients, reply="2.0.0 Ok: queued as 4Xk2")  # fmt: skip
    assert queue.record([done])


def test_a_partly_delivered_message_reads_as_a_refusal_not_a_failure(signed_in, make_message):
    message = make_message(to=["here@example.com", "gone@example.com"])
    partly_sent(message.id, utcnow())
    state = parse(signed_in.get(f"/messages/{message.id}")).find("section", id="state")
    dl = state.find("dl", class_="facts")
    shown = facts(dl)
    assert shown["Status"] == "partly delivered" and "Last error" not in shown
    assert "gone@example.com: 550 5.1.1 no such user" in shown["Refused"]
    assert [s.text for s in dl.find_all("span", class_="status")] == ["partly delivered"]
    assert dl.find("dd", class_="warn-text") and not dl.find_all("dd", class_="error-text")
    (attempt,) = state.find("table", class_="attempts").find("tbody").find_all("tr")
    assert attempt.find_all("td")[-1].classes == ["warn-text"]


def test_a_sent_attempt_shows_the_servers_reply(signed_in, make_message):
    message = make_message()
    held = claim(message.id)
    assert queue.record(
        [queue.Finished(held, Outcome.SENT, utcnow(), reply="2.0.0 Ok: queued as 4Xk2")]
    )
    page = parse(signed_in.get(f"/messages/{message.id}"))
    (attempt,) = page.find("table", class_="attempts").find("tbody").find_all("tr")
    assert attempt.find("td", class_="reply").text == "2.0.0 Ok: queued as 4Xk2"


@pytest.mark.parametrize("html, noted", [
    ('<p><img src="https://tracker.example/p.gif"></p>', True),
    ("<table><td background=//cdn.example/bg.png>x</td></table>", True),
    ('<div style="background: url(\'http://cdn.example/a.png\')">x</div>', True),
    ('<img srcset="a.png 1x, https://cdn.example/b.png 2x">', True),
    ('<img src="data:image/png;base64,iVBO//Rw0KGgo=">', False),
    ('<a href="https://shop.example/">shop</a> https://shop.example/', False),
])  # fmt: skip
def test_the_message_page_says_when_remote_images_were_not_loaded(
    signed_in, make_message, html, noted
):
    message = make_message(html=html)
    page = parse(signed_in.get(f"/messages/{message.id}"))
    notes = page.find_all("p", class_="note")
    assert [n.text.startswith("Remote images were not loaded") for n in notes] == (
        [True] if noted else []
    )


@pytest.mark.parametrize("status", list(Status))
def test_the_message_page_has_no_empty_rows(signed_in, make_in, status):
    pk = make_in(status, priority=0)
    page = parse(signed_in.get(f"/messages/{pk}"))
    for dl in page.find_all("dl", class_="facts"):
        assert all(value for value in facts(dl).values()), facts(dl)
    assert "Priority" not in facts(page.find_all("dl", class_="facts")[0])
